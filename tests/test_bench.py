"""The benchmark's modes (repro/bench), each run once with a few rounds, as tests.

Each mode × kernel must produce its timings (one finite value per round) and
time a path that computes the spec model's bits; timing itself is
``python -m analysis bench``'s job. GPU modes carry the ``gpu`` marker;
the native launchers skip with the reason where a C compiler, the CUDA driver
or cuda.bindings is missing.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.judge.bench_verdict import judge
from repro import bench
from repro.bench import native

QUICK_ROUNDS = 3
pytestmark = pytest.mark.benchmark


def _mode_params():
    for mode in bench.MODES:
        marks = [] if mode.needs == "host" else [pytest.mark.gpu]
        for which in bench.WHICH:
            yield pytest.param(mode, which, marks=marks, id=f"{mode.name}-{which}")


@pytest.fixture(scope="module")
def rig(contract):
    return bench.make_rig(contract)


@pytest.mark.parametrize(("mode", "which"), list(_mode_params()))
def test_mode_times_a_path_that_computes_the_spec(rig, mode, which):
    why = bench.unavailable(mode, rig)
    if why:
        pytest.skip(why)
    (sample,) = bench.run_mode(mode, rig, (which,), QUICK_ROUNDS)
    assert len(sample.us) == QUICK_ROUNDS and all(math.isfinite(u) for u in sample.us)
    if mode.measure is not bench.modes.graph_step:  # a difference of two step times: an empty node's may be ≤ 0
        assert min(sample.us) > 0
    else:
        assert sample.extra["step_us"] > 0
    assert sample.extra["matches_spec"], f"{mode.name} [{which}] timed a path that disagrees with the spec model"


def test_slowed_controller_spins_at_least_its_time_and_keeps_the_bits(contract, host):
    """The deliberate regression the gate must catch: same λ bits, each call at least the spin's length."""
    spin_ns = 2000
    rig = bench.make_rig(contract, bench.slowed(bench.sources(contract)["controller"], spin_ns))
    mode = next(m for m in bench.MODES if m.needs == "host")
    (sample,) = bench.run_mode(mode, rig, ("controller",), QUICK_ROUNDS)
    assert sample.extra["matches_spec"]
    assert min(sample.us) >= spin_ns / 1000, "a call of the slowed controller took less than its spin"


@pytest.mark.gpu
def test_gate_catches_a_controller_slowed_on_the_gpu(contract):
    """A baseline pair, the same controller again, then one slowed by ~1 µs: only the slowed run fails."""
    device_modes = tuple(m for m in bench.MODES if m.set_by == "device" and "1M" not in m.name)
    rounds = lambda m: 5  # noqa: E731
    first, second, again = (bench.frame(bench.measure(contract, device_modes, rounds)) for _ in range(3))
    rig = bench.make_rig(contract)
    clock = rig.cupy.cp.cuda.Device().attributes["ClockRate"]
    slow = bench.frame(bench.measure(contract, device_modes, rounds,
                                     controller=bench.slowed(rig.sources["controller"], 1000, clock)))
    assert not [c.mode for c in judge(again, first, second) if c.regressed]
    flagged = {c.mode for c in judge(slow, first, second) if c.regressed}
    gated = {c.mode for c in judge(slow, first, second) if c.gated}
    assert flagged == gated and "graph replay: controller" in flagged


def test_native_launcher_builds_or_says_why():
    """The C loop compiles with the host's C compiler (no cuda.h, no -lcuda needed)."""
    if native._cc() is None:
        pytest.skip("no C compiler")
    exe = native.build()
    assert exe.is_file() and np.fromfile(exe, dtype=np.uint8)[:4].tobytes() == b"\x7fELF"
