"""Launch-overhead benchmark: what the controller costs per step, each mode beside an empty-kernel twin.

Every test is marked ``benchmark``; the GPU modes also ``gpu``. Each records in
``extra_info`` the mode, which kernel ran (controller or empty), and how many
steps one timed round holds (``ops_per_round``), so that
``analysis.bench_report`` can turn round times into µs per step. Modes timed
with CUDA events record per-step device times (``device_us``) as well.
Warm-up runs first everywhere (module load and NVRTC stay out of the numbers),
and the ISV is never zero: sentinel bits, a valid λ, KL and target.
"""

from __future__ import annotations

import numpy as np
import pytest

from repro import spec
from repro.backends.base import chunked, unchunked
from repro.backends.translation_unit import KERNELS
from repro.isv import new_isv
from repro.kernel_source import load_kernel
from repro.timing import FEED_EMA, capture_graph, copy_bandwidth_gbs, event_time_us

WHICH = ("controller", "empty")
F32 = np.float32
ASYNC_LAUNCHES = 2000  # launches per timed round, one synchronisation at its end
EVENT_LAUNCHES = 5000
GRAPH_STEPS = 500
ONE_SCENARIO_STEPS = 100_000
MANY_RUNS, MANY_STEPS = 1 << 20, 256

pytestmark = pytest.mark.benchmark


def _sources(contract):
    entry = contract.controller("fixed")
    return {"controller": load_kernel(entry.kernel, entry.symbol),
            "empty": load_kernel(KERNELS / "empty_kernel.cu", "rlq_empty_kernel")}


def _live_isv(contract) -> np.ndarray:
    """One ISV row: sentinel bits, the seed λ, KL above the band (the ramp branch runs), the target."""
    s, entry = contract.slots, contract.controller("fixed")
    isv = new_isv(s, entry.value("seed_lambda"))
    isv[0, s.kl], isv[0, s.target] = F32(0.5), F32(0.02)
    return isv


def _record(benchmark, mode: str, which: str, ops: int, **extra) -> None:
    benchmark.group = mode
    benchmark.extra_info.update(mode=mode, kernel=which, ops_per_round=ops, **extra)


@pytest.fixture(scope="module")
def host_kernels(contract, host):
    return {w: host.compile(src, contract.slots) for w, src in _sources(contract).items()}


@pytest.mark.parametrize("which", WHICH)
def test_host_call(benchmark, contract, host_kernels, which):
    """One ctypes call of the compiled kernel on the CPU (runs in CI)."""
    kernel = host_kernels[which]
    isv = _live_isv(contract)[0]
    addr = isv.ctypes.data
    _record(benchmark, "host ctypes call", which, 1)
    benchmark(kernel.step, addr)
    lam = isv[contract.slots.lambda_]
    assert F32(0.05) <= lam <= F32(1.0), "the timed kernel left λ outside its bounds"


# ---------------------------------------------------------------- GPU modes


@pytest.fixture(scope="module")
def gpu(contract):
    from repro.backends import get_backend

    be = get_backend("cupy")
    cp = be.cp
    kernels = {w: be.compile(src, contract.slots) for w, src in _sources(contract).items()}
    slot_defs = f"#define RLQ_KL_SLOT {contract.slots.kl}\n"
    feed = be.helper_module(slot_defs + FEED_EMA, "feed kernel").get_function("rlq_feed_ema")
    isv = cp.asarray(_live_isv(contract)[0])
    for k in kernels.values():  # warm up: module load, first launch
        k.launch(isv)
    cp.cuda.Device().synchronize()
    return be, cp, kernels, feed, isv


@pytest.mark.gpu
@pytest.mark.parametrize("which", WHICH)
def test_cupy_async_launch(benchmark, gpu, which):
    """Host cost of enqueueing one (1,),(1,) launch: many launches, one synchronise per round."""
    be, cp, kernels, _, isv = gpu
    fn, stream = kernels[which].step, cp.cuda.get_current_stream()

    def enqueue():
        for _ in range(ASYNC_LAUNCHES):
            fn((1,), (1,), (isv,))
        stream.synchronize()

    _record(benchmark, "cupy async launch", which, ASYNC_LAUNCHES)
    benchmark.pedantic(enqueue, rounds=30, warmup_rounds=3)


@pytest.mark.gpu
@pytest.mark.parametrize("which", WHICH)
def test_cupy_launch_and_sync(benchmark, gpu, which):
    """The round trip a training loop pays if it waits for the controller."""
    be, cp, kernels, _, isv = gpu
    fn, stream = kernels[which].step, cp.cuda.get_current_stream()

    def once():
        fn((1,), (1,), (isv,))
        stream.synchronize()

    _record(benchmark, "cupy launch + sync", which, 1)
    benchmark.pedantic(once, rounds=3000, warmup_rounds=200)


@pytest.mark.gpu
@pytest.mark.parametrize("which", WHICH)
def test_cupy_device_time(benchmark, gpu, which):
    """Device time per launch: CUDA events around a long stream of launches."""
    be, cp, kernels, _, isv = gpu
    fn = kernels[which].step
    device_us = []

    def stream_of_launches():
        def work():
            for _ in range(EVENT_LAUNCHES):
                fn((1,), (1,), (isv,))

        device_us.append(event_time_us(cp, work) / EVENT_LAUNCHES)

    _record(benchmark, "device time per launch (events)", which, EVENT_LAUNCHES)
    benchmark.pedantic(stream_of_launches, rounds=15, warmup_rounds=2)
    benchmark.extra_info["device_us"] = device_us[2:]


@pytest.mark.gpu
@pytest.mark.parametrize("with_feed", [False, True], ids=["controller_alone", "feed_and_controller"])
@pytest.mark.parametrize("which", WHICH)
def test_cuda_graph_replay(benchmark, gpu, which, with_feed):
    """K steps captured in a CUDA graph and replayed; cost per step (wall, synchronised per replay)."""
    be, cp, kernels, feed, isv = gpu
    fn = kernels[which].step
    kl_new = cp.asarray(np.array([0.5], dtype=F32))
    stream = cp.cuda.Stream(non_blocking=True)

    def launches():
        for _ in range(GRAPH_STEPS):
            if with_feed:
                feed((1,), (1,), (isv, kl_new, F32(0.1)), stream=stream)
            fn((1,), (1,), (isv,), stream=stream)

    graph = capture_graph(cp, launches, stream)
    graph.launch(stream)
    stream.synchronize()

    def replay():
        graph.launch(stream)
        stream.synchronize()

    mode = "graph replay: " + ("feed + controller" if with_feed else "controller")
    _record(benchmark, mode, which, GRAPH_STEPS)
    benchmark.pedantic(replay, rounds=50, warmup_rounds=3)


@pytest.mark.gpu
@pytest.mark.parametrize("which", WHICH)
def test_looped_one_scenario(benchmark, gpu, contract, which):
    """The controller inlined in a loop: ns per step for one scenario (one thread)."""
    be, cp, kernels, _, _ = gpu
    kernel = kernels[which]
    lam0 = cp.asarray(np.array([0.1], dtype=F32))
    target = cp.asarray(np.array([0.02], dtype=F32))
    trace = (0.02 * np.exp(np.random.default_rng(0).standard_normal((ONE_SCENARIO_STEPS, 1)))).astype(F32)
    kl = cp.asarray(chunked(trace))
    out = cp.empty_like(kl)
    device_us = []

    def run():
        device_us.append(event_time_us(cp, lambda: kernel.run_private(lam0, kl, target, out)) / ONE_SCENARIO_STEPS)

    _record(benchmark, "looped harness, one scenario", which, ONE_SCENARIO_STEPS)
    benchmark.pedantic(run, rounds=10, warmup_rounds=2)
    benchmark.extra_info["device_us"] = device_us[2:]
    if which == "controller":
        rule = spec.Rule.of(contract.controller("fixed"))
        expected = spec.run(rule, [0.1], trace[:2000], F32(0.02))
        got = unchunked(cp.asnumpy(out))[:2000]
        assert np.array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("which", WHICH)
def test_looped_many_scenarios(benchmark, gpu, contract, which):
    """1M scenarios × 256 steps, one thread each: steps/s and bandwidth against a copy of the same run."""
    be, cp, kernels, _, _ = gpu
    kernel = kernels[which]
    rng = cp.random.default_rng(1)
    # generated directly in the harness's chunk-major layout [T/4, S, 4]
    kl = (0.02 * cp.exp(rng.standard_normal((MANY_STEPS // 4, MANY_RUNS, 4), dtype=cp.float32))).astype(cp.float32)
    lam0 = cp.full(MANY_RUNS, 0.1, dtype=cp.float32)
    target = cp.full(MANY_RUNS, 0.02, dtype=cp.float32)
    out = cp.empty_like(kl)
    moved = kl.nbytes + out.nbytes + lam0.nbytes + target.nbytes  # bytes the harness must move
    copy_gbs = copy_bandwidth_gbs(cp, kl.nbytes)
    device_us = []

    def run():
        device_us.append(event_time_us(cp, lambda: kernel.run_private(lam0, kl, target, out)))

    _record(benchmark, "looped harness, 1M scenarios", which, MANY_RUNS * MANY_STEPS)
    benchmark.pedantic(run, rounds=10, warmup_rounds=2)
    best = min(device_us[2:])
    achieved = moved / (best * 1e-6) / 1e9
    benchmark.extra_info.update(device_us=[t / (MANY_RUNS * MANY_STEPS) for t in device_us[2:]],
                                steps_per_s=MANY_RUNS * MANY_STEPS / (best * 1e-6), bytes_moved=moved,
                                achieved_gbs=achieved, copy_gbs=copy_gbs, copy_fraction=achieved / copy_gbs)
    if which == "controller":
        rule = spec.Rule.of(contract.controller("fixed"))
        cols = slice(0, 64)
        expected = spec.run(rule, cp.asnumpy(lam0[cols]), unchunked(cp.asnumpy(kl[:, cols])), F32(0.02))
        assert np.array_equal(unchunked(cp.asnumpy(out[:, cols])).view(np.uint32), expected.view(np.uint32))
