"""The benchmark: each mode of repro/bench × {controller, empty} is a pytest-benchmark benchmark.

pytest-benchmark times every round itself, with the clock the mode names (``@pytest.mark.benchmark(timer=…)``:
``time.perf_counter`` on the host, :func:`repro.bench.timing.synced_clock` for CuPy's launches,
:func:`repro.bench.timing.device_clock`, CUDA events, where the device sets the time), around
``iterations`` calls of the mode's call (``benchmark.pedantic``); its stats are seconds per call, and
``extra_info["steps_per_call"]`` turns them into seconds per step. ``python -m analysis bench``
(``tox -e bench``) runs them and gates the JSON pytest-benchmark writes; ``pytest tests/test_bench.py
--benchmark-only`` runs them as any pytest-benchmark suite (``--benchmark-autosave``, ``--benchmark-compare``,
``--benchmark-histogram``, ``--benchmark-json``). With ``--benchmark-disable`` (the CPU and GPU suites)
pytest-benchmark calls each mode once, untimed, and the test checks what it must everywhere: a path that
computes the spec model's bits. GPU tests carry ``gpu``. Under pytest-xdist pytest-benchmark times nothing (it
turns itself off), so no worker of their own is needed; a test that times by its own clock holds the device alone
(``gpu_alone``).
"""

from __future__ import annotations

import contextlib

import pandas as pd
import pytest

from analysis.judge.bench_verdict import judge_run
from repro import bench
from repro.bench.modes import live_isv
from repro.bench.timing import device_clock


def _mode_params():
    for mode in bench.MODES:
        marks = [pytest.mark.benchmark(timer=mode.timer, group=mode.name)]
        marks += [] if mode.needs == "host" else [pytest.mark.gpu]
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


@pytest.mark.parametrize(("mode", "which"), list(_mode_params()))
def test_mode(benchmark, bench_rig, request, mode, which):
    why = bench.unavailable(mode, bench_rig)
    if why:
        pytest.skip(why)
    b = mode.setup(bench_rig, which)
    # what the JSON says of the row before its rounds: a path that timed wrong bits is saved and then fails
    benchmark.extra_info.update(bench.info(mode, which, b), slow_ns=request.config.getoption("--bench-slow-ns"))
    rounds = request.config.getoption("--bench-rounds") or mode.rounds
    with b.stream if b.stream is not None else contextlib.nullcontext():  # the clocks read the current stream
        benchmark.pedantic(b.call, args=b.args, rounds=rounds, iterations=b.iterations, warmup_rounds=b.warmup)
    assert b.ok, f"{mode.name} [{which}] timed a path that disagrees with the spec model"
    if benchmark.enabled:
        assert benchmark.stats.stats.rounds == rounds and benchmark.stats.stats.min > 0


def test_slowed_controller_spins_at_least_its_time_and_keeps_the_bits(contract, host):
    """The deliberate regression the gate must catch: same λ bits, each call at least the spin's length."""
    spin_ns = 2000
    rig = bench.make_rig(contract, bench.slowed(bench.sources(contract)["controller"], spin_ns))
    mode = next(m for m in bench.MODES if m.needs == "host")
    sample = bench.time_rounds(mode, rig, "controller", 3)
    assert sample.matches_spec and len(sample.us) == 3
    assert min(sample.us) >= spin_ns / 1000, "a call of the slowed controller took less than its spin"


@pytest.mark.gpu
@pytest.mark.slow  # device timings want a quiet host: beside 15 xdist workers the H200's graph-replay spread read 48.9 %
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
    assert flagged == gated and "graph replay: controller" in flagged, said


@pytest.mark.gpu
def test_device_clock_reads_the_gpus_time_of_a_known_wait(contract):
    """The clock pytest-benchmark calls for device modes, around one launch of a controller that spins about
    200 µs of SM cycles: it reads at least that.

    The device is shared with the other workers' tests: their kernels time-slice the GPU and can only lengthen
    the interval the events read, never shorten it, and the upper bound (1 s) is 5 000 times the spin."""
    spin_ns = 200_000
    rig = bench.make_rig(contract, bench.slowed(bench.sources(contract)["controller"], spin_ns,
                                               bench.gpu_info()["sm_clock_khz"]))
    fn = rig.kernel(rig.cupy, "controller").step
    isv = rig.cupy.cp.asarray(live_isv(contract))
    fn((1,), (1,), (isv,))  # module load and first launch
    start = device_clock()
    fn((1,), (1,), (isv,))
    took = device_clock() - start
    assert spin_ns * 1e-9 <= took < 1.0, took
