"""The benchmark: each mode of repro/bench × {controller, empty} is a pytest-benchmark benchmark.

``python -m analysis bench`` (``tox -e bench``) runs them with each mode's own rounds and
gates the JSON pytest-benchmark writes; ``pytest tests/test_bench.py --benchmark-only`` runs
them as any pytest-benchmark suite (``--benchmark-autosave``, ``--benchmark-compare``,
``--benchmark-histogram``, ``--benchmark-json``). A mode times both kernels in interleaved
rounds once (:func:`repro.bench.run_mode`); each kernel's benchmark hands its rounds to
pytest-benchmark through the mode's own clock (:func:`repro.bench.timing.round_clock`:
CUDA events where ``extra_info["clock"]`` says so), so its stats are those rounds, in
seconds per step. With ``--benchmark-disable`` (the CPU and GPU suites) each mode runs
``QUICK_ROUNDS`` rounds and the tests check what they must everywhere: one finite time
per round, a path that computes the spec model's bits. GPU tests carry ``gpu``; those
that time the device share one xdist group, so that ``-n`` never splits them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from analysis.judge.bench_verdict import judge_run
from repro import bench
from repro.bench import native
from repro.bench.timing import advance, round_clock

QUICK_ROUNDS = 3
pytestmark = pytest.mark.benchmark(timer=round_clock)  # pytest-benchmark's settings marker: the modes' clock
TIMING = pytest.mark.xdist_group("gpu-timing")


def _mode_params():
    for mode in bench.MODES:
        marks = [] if mode.needs == "host" else [pytest.mark.gpu, TIMING]
        for which in bench.WHICH:
            yield pytest.param(mode, which, marks=marks, id=f"{mode.slug}-{which}")


@pytest.fixture(scope="session")
def bench_rig(contract, request):
    """The rig every benchmark shares: with ``--bench-slow-ns NS``, a controller slowed on purpose."""
    ns = request.config.getoption("--bench-slow-ns")
    controller = None
    if ns:
        gpu = bench.gpu_info()
        controller = bench.slowed(bench.sources(contract)["controller"], ns,
                                  gpu["sm_clock_khz"] if gpu else 1_980_000)
    return bench.make_rig(contract, controller)


def _measured(rig, mode, rounds: int) -> dict[str, bench.Sample]:
    """Both kernels of ``mode``, timed once per session in interleaved rounds."""
    key = ("measured", mode.name, rounds)
    if key not in rig.cache:
        rig.cache[key] = {s.kernel: s for s in bench.run_mode(mode, rig, bench.WHICH, rounds)}
    return rig.cache[key]


@pytest.mark.parametrize(("mode", "which"), list(_mode_params()))
def test_mode(benchmark, bench_rig, request, mode, which):
    why = bench.unavailable(mode, bench_rig)
    if why:
        pytest.skip(why)
    rounds = request.config.getoption("--bench-rounds") or (mode.rounds if benchmark.enabled else QUICK_ROUNDS)
    sample = _measured(bench_rig, mode, rounds)[which]
    assert len(sample.us) == rounds and all(math.isfinite(u) for u in sample.us)
    if mode.measure is not bench.modes.graph_step:  # a difference of two step times: an empty node's may be ≤ 0
        assert min(sample.us) > 0
    else:
        assert sample.extra["step_us"] > 0
    assert sample.extra["matches_spec"], f"{mode.name} [{which}] timed a path that disagrees with the spec model"
    benchmark.group = mode.name
    benchmark.extra_info.update(sample.info(), slow_ns=request.config.getoption("--bench-slow-ns"))
    rounds_left = iter(sample.us)
    benchmark.pedantic(lambda: advance(next(rounds_left)), rounds=len(sample.us), iterations=1)
    if benchmark.enabled:  # pytest-benchmark's stats are the mode's own rounds
        assert benchmark.stats.stats.median * 1e6 == pytest.approx(float(np.median(sample.us)), rel=1e-6)


def test_slowed_controller_spins_at_least_its_time_and_keeps_the_bits(contract, host):
    """The deliberate regression the gate must catch: same λ bits, each call at least the spin's length."""
    spin_ns = 2000
    rig = bench.make_rig(contract, bench.slowed(bench.sources(contract)["controller"], spin_ns))
    mode = next(m for m in bench.MODES if m.needs == "host")
    (sample,) = bench.run_mode(mode, rig, ("controller",), QUICK_ROUNDS)
    assert sample.extra["matches_spec"]
    assert min(sample.us) >= spin_ns / 1000, "a call of the slowed controller took less than its spin"


def test_interleaved_rounds_give_the_paired_difference_with_its_interval(contract, host):
    """controller − empty per round, averaged, with a positive 95 % half-width; a 2 µs spin shows in it."""
    mode = next(m for m in bench.MODES if m.needs == "host")
    rig = bench.make_rig(contract, bench.slowed(bench.sources(contract)["controller"], 2000))
    ctrl, empty = bench.run_mode(mode, rig, bench.WHICH, 6)
    diff = np.subtract(ctrl.us, empty.us)
    assert ctrl.extra["diff_us"] == pytest.approx(diff.mean()) and ctrl.extra["diff_ci95_us"] > 0
    assert ctrl.extra["diff_us"] > 2.0 - ctrl.extra["diff_ci95_us"]  # the 2 µs spin, seen in the difference


@pytest.mark.gpu
@pytest.mark.slow  # device timings want a quiet host: beside 15 xdist workers the H200's graph-replay spread read 48.9 %
@TIMING
def test_gate_catches_a_controller_slowed_on_the_gpu(contract, gpu_alone):
    """A baseline pair, the same controller again, then one slowed by ~1 µs: only the slowed run fails.

    Each mode's own rounds, the device to this test alone (``gpu_alone``: under -n the other workers wait).
    """
    device_modes = tuple(m for m in bench.MODES if m.set_by == "device" and "1M" not in m.name)

    def run(controller=None):
        return pd.DataFrame([s.summary() for s in bench.measure(contract, device_modes, None, controller)])

    first, second, again = run(), run(), run()
    gpu = bench.gpu_info()
    slow = run(bench.slowed(bench.sources(contract)["controller"], 1000, gpu["sm_clock_khz"]))
    said = "; ".join(f"{c.mode}: base {c.base:.4g}, spread {c.spread:.1%}, again {c.now:.4g}"
                     for c in judge_run(again, first, second))
    assert not [c.mode for c in judge_run(again, first, second) if c.regressed], said
    flagged = {c.mode for c in judge_run(slow, first, second) if c.regressed}
    gated = {c.mode for c in judge_run(slow, first, second) if c.gated}
    assert flagged == gated and {"graph replay: controller", f"graph of {bench.modes.STEP_NODES} kernels: controller node"} \
        <= flagged, said


def test_native_launcher_builds_or_says_why():
    """The C loop compiles with the host's C compiler (no cuda.h, no -lcuda needed)."""
    if native._cc() is None:
        pytest.skip("no C compiler")
    exe = native.build()
    assert exe.is_file() and np.fromfile(exe, dtype=np.uint8)[:4].tobytes() == b"\x7fELF"
