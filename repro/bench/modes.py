"""The benchmark's modes: how a training loop can run the controller, each timed beside an empty-kernel twin.

A mode is one :class:`Mode` in :data:`MODES`: its clock (a function pytest-benchmark calls before and after
each round: ``time.perf_counter``, :func:`repro.bench.timing.synced_clock` or
:func:`repro.bench.timing.device_clock`) and its ``setup``, which compiles a kernel (``controller`` or
``empty``), checks that the path it times computes the spec model's bits (a timing of wrong code is no
benchmark) and returns a :class:`Bench`: the call pytest-benchmark repeats, how many calls a round holds and how
many controller steps a call is. The ISV is never zero: sentinel bits, a valid λ, KL above the band (the ramp
branch runs) and a target. ``tests/test_bench.py`` hands each to ``benchmark.pedantic``; :func:`time_rounds`
times the same rounds with the same clock for tests that judge runs without pytest-benchmark.

The modes answer distinct questions: what a host call costs (the CPU's only mode); what enqueuing a launch
from Python costs, and what a loop that waits for λ every step costs; what the controller costs as a node of a
CUDA graph (the device sets it); what its arithmetic costs per step inlined in a loop; and the throughput of
a million runs. Issue 36 removed six that asked one of these again or timed themselves: the C driver API's
two loops (a separate C program timed its own rounds, which pytest-benchmark cannot time; never gated: 74 % and
18 % run-to-run on the H200), cuda.bindings' launches and CUDA events around CuPy launches (Python's launch
cost again, through another binding or another clock), the graph of (feed, controller) pairs and the
64-kernel training-step graph (the controller's node cost again: 1.05 µs against graph replay's 1.04 µs on the
H200, the latter a difference of two step times rather than a timed call).
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from repro.backends import Backend
from repro.backends.base import chunked, unchunked
from repro.backends.translation_unit import KERNELS
from repro.bench.timing import capture_graph, copy_bandwidth_gbs, device_clock, synced_clock
from repro.core import spec
from repro.core.contract import Contract
from repro.core.errors import BackendUnavailable
from repro.core.f32 import F32, same
from repro.core.isv import new_isv
from repro.core.kernel_source import KernelSource, load_kernel

WHICH = ("controller", "empty")
VERIFY_STEPS = 16  # launches per correctness check: 13 ramp steps reach the ceiling, the rest are clamped
KL_HIGH, TARGET = F32(0.5), F32(0.02)

HOST_CALLS = 2000  # ctypes calls per timed round
ASYNC_LAUNCHES = 2000  # launches per timed round, one synchronisation at its end
SYNC_LAUNCHES = 200  # launch + synchronise pairs per timed round
GRAPH_STEPS = 500  # controller nodes per graph; a timed round replays each of the ISV_POOL graphs once
#: Device modes spread the controller's ISV over this many addresses, each in its own 2 MiB page at its own
#: offset: the latency of one thread's load/store depends on where the line lands (the L2 partition), so a
#: single address per process made "graph replay: controller" move 10 % between runs; a round covers all of them.
ISV_POOL, POOL_STRIDE = 16, (2 << 20) + 4352  # ISVs, bytes between two of them
ONE_SCENARIO_STEPS = 100_000
MANY_RUNS, MANY_STEPS = 1 << 20, 256

EVENTS, WALL_PY, WALL_SYNCED = "CUDA events", "wall clock (Python)", "wall clock, device finished (Python)"


@dataclass
class Rig:
    """What the modes share: the contract, the two sources and, built on first use, their compiled forms."""

    contract: Contract
    sources: dict[str, KernelSource]
    host: Backend | None = None
    cupy: Backend | None = None
    cache: dict = field(default_factory=dict)

    def kernel(self, backend: Backend, which: str):
        key = (backend.name, which)
        if key not in self.cache:
            self.cache[key] = backend.compile(self.sources[which], self.contract.slots)
        return self.cache[key]

    def gpu(self):
        """The cupy backend and its array module; :class:`BackendUnavailable` where there is none."""
        if self.cupy is None:
            raise BackendUnavailable("cupy backend: not given to this run")
        return self.cupy, self.cupy.cp


def sources(contract: Contract, controller: KernelSource | None = None) -> dict[str, KernelSource]:
    """The fixed controller (or ``controller``, e.g. a deliberately slowed one) and the empty kernel."""
    return {"controller": controller or contract.source("fixed"),
            "empty": load_kernel(KERNELS / "empty_kernel.cu", "rlq_empty_kernel")}


def live_isv(contract: Contract) -> np.ndarray:
    """One ISV row ``[isv_len]``: sentinel bits, the seed λ, KL above the band, the target."""
    s, entry = contract.slots, contract.controller("fixed")
    isv = new_isv(s, entry.value("seed_lambda"))[0]
    isv[s.kl], isv[s.target] = KL_HIGH, TARGET
    return isv


def expected_isv(contract: Contract, which: str, isv0: np.ndarray, kl: np.ndarray) -> np.ndarray:
    """The ISV after one step per value of ``kl`` on the spec model (the empty kernel changes nothing)."""
    s = contract.slots
    out = isv0.copy()
    if which == "empty":
        return out
    rule = spec.Rule.of(contract.controller("fixed"))
    kl = np.asarray(kl, dtype=F32).reshape(-1, 1)
    out[s.lambda_] = spec.run(rule, [isv0[s.lambda_]], kl, isv0[s.target])[-1, 0]
    out[s.kl] = kl[-1, 0]
    return out


@dataclass
class Bench:
    """One mode × kernel, set up and checked: what pytest-benchmark times.

    A round is ``iterations`` calls of ``call`` between two readings of the mode's clock; a call is ``steps``
    controller steps, so pytest-benchmark's stats (seconds per call) / ``steps`` are seconds per step.
    """

    call: Callable[..., None]
    iterations: int  # calls per round
    steps: int  # controller steps per call
    ok: bool  # the timed path computed the spec model's bits
    extra: dict = field(default_factory=dict)  # what else the JSON keeps (pytest-benchmark's extra_info)
    args: tuple = ()  # what each call is given (a launch's grid, block and arguments: no wrapper in the timed loop)
    stream: object = None  # the CuPy stream the calls enqueue on: the clocks read the current one, so enter it
    warmup: int = 2  # rounds run untimed first (module load and first-launch costs stay out of the numbers)
    hold: object = None  # what the calls use only through raw addresses (arrays, graphs' buffers)


@dataclass
class Sample:
    """One mode with one kernel timed by :func:`time_rounds`: µs per step in each round, and what they are."""

    mode: str
    kernel: str
    clock: str
    set_by: str
    us: list[float]
    matches_spec: bool

    def summary(self) -> dict:
        """The row the gate reads (as :func:`analysis.judge.bench_verdict.frame` makes from pytest-benchmark's JSON)."""
        per = np.asarray(self.us, dtype=float)
        q1, med, q3 = np.percentile(per, [25, 50, 75])
        return {"mode": self.mode, "kernel": self.kernel, "clock": self.clock, "set_by": self.set_by,
                "matches_spec": self.matches_spec, "median_us": med, "q1_us": q1, "q3_us": q3, "min_us": per.min(),
                "max_us": per.max(), "mean_us": per.mean(), "stddev_us": per.std(ddof=1) if len(per) > 1 else 0.0,
                "rounds": len(per)}


def info(mode: Mode, which: str, b: Bench) -> dict:
    """What a benchmark stores in pytest-benchmark's ``extra_info``: the mode, the kernel, how to read its stats."""
    return {"mode": mode.name, "kernel": which, "clock": mode.clock, "set_by": mode.set_by, "what": mode.what,
            "steps_per_call": b.steps, "matches_spec": b.ok, **b.extra}


def _entered(stream):
    import contextlib

    return stream if stream is not None else contextlib.nullcontext()


def time_rounds(mode: Mode, rig: Rig, which: str, rounds: int) -> Sample:
    """``rounds`` rounds of ``mode`` × ``which``, each timed by the mode's clock as pytest-benchmark times them."""
    b = mode.setup(rig, which)
    us = []
    with _entered(b.stream):
        for r in range(b.warmup + rounds):
            start = mode.timer()
            for _ in range(b.iterations):
                b.call(*b.args)
            took = mode.timer() - start
            if r >= b.warmup:
                us.append(took * 1e6 / (b.iterations * b.steps))
    return Sample(mode.name, which, mode.clock, mode.set_by, us, b.ok)


def _verified(rig: Rig, which: str, isv: np.ndarray) -> bool:
    """Whether ``isv``, a live ISV after VERIFY_STEPS steps of ``which``, holds the spec model's bits."""
    return same(isv, expected_isv(rig.contract, which, live_isv(rig.contract), np.full(VERIFY_STEPS, KL_HIGH)))


# ------------------------------------------------------------------ host


def host_call(rig: Rig, which: str) -> Bench:
    kernel = rig.kernel(rig.host, which)
    check = live_isv(rig.contract)
    for _ in range(VERIFY_STEPS):
        kernel.step(check.ctypes.data)
    isv = live_isv(rig.contract)
    step, addr = kernel.step, isv.ctypes.data
    return Bench(step, HOST_CALLS, 1, _verified(rig, which, check), args=(addr,), hold=isv)


# ------------------------------------------------------------------ CuPy, one launch per step


def _device_check(rig: Rig, which: str, run_steps: Callable[[object, int], None]) -> bool:
    """Run VERIFY_STEPS steps through a launch path on a fresh device ISV; compare with the spec."""
    _, cp = rig.gpu()
    isv = cp.asarray(live_isv(rig.contract))
    run_steps(isv, VERIFY_STEPS)
    cp.cuda.Device().synchronize()
    return _verified(rig, which, cp.asnumpy(isv))


def cupy_launch(rig: Rig, which: str, sync: bool) -> Bench:
    """One CuPy launch per call on the current stream: enqueued only (the round's clock waits for the device at its
    end), or with a stream synchronise after each (a loop that waits for λ)."""
    _, cp = rig.gpu()
    fn = rig.kernel(rig.cupy, which).step

    def launches(isv, n):
        for _ in range(n):
            fn((1,), (1,), (isv,))

    ok = _device_check(rig, which, launches)
    isv = cp.asarray(live_isv(rig.contract))
    stream = cp.cuda.get_current_stream()

    def launch_and_wait():
        fn((1,), (1,), (isv,))
        stream.synchronize()

    if sync:
        return Bench(launch_and_wait, SYNC_LAUNCHES, 1, ok, hold=isv)
    return Bench(fn, ASYNC_LAUNCHES, 1, ok, args=((1,), (1,), (isv,)), hold=isv)


# ------------------------------------------------------------------ CUDA graphs


def isv_pool(rig: Rig):
    """``ISV_POOL`` live ISVs on the device, ``POOL_STRIDE`` bytes apart (views into one allocation), refilled.

    One pool per rig: a mode's controller and empty graphs use the same addresses, so their difference
    carries no address effect. Each call writes the live ISV into every view again (a fresh start).
    """
    _, cp = rig.gpu()
    isv0 = live_isv(rig.contract)
    if "pool" not in rig.cache:
        step = POOL_STRIDE // 4
        buf = cp.zeros(step * ISV_POOL + isv0.size, dtype=cp.float32)
        rig.cache["pool"] = buf, [buf[k * step:k * step + isv0.size] for k in range(ISV_POOL)]
    buf, views = rig.cache["pool"]
    for v in views:
        v[...] = cp.asarray(isv0)
    cp.cuda.Device().synchronize()  # filled on the current stream; the graphs replay on non-blocking ones
    return isv0, buf, views


def _pool_graphs(cp, pool: list, launches: Callable[[object, object], None], want: np.ndarray):
    """One graph per pooled ISV of what ``launches(isv, stream)`` enqueues, a stream to replay them on, and the
    correctness check: whether one replay of each from its live ISV leaves ``want`` (the spec model's ISV)."""
    graphs = [capture_graph(cp, partial(launches, isv)) for isv in pool]
    stream = cp.cuda.Stream(non_blocking=True)
    for g in graphs:
        g.launch(stream)
    stream.synchronize()
    return graphs, stream, all(same(cp.asnumpy(isv), want) for isv in pool)


def graph_replay(rig: Rig, which: str) -> Bench:
    """Graphs of GRAPH_STEPS controller launches, one per pooled ISV address; a call replays the next graph, a
    round all of them once."""
    _, cp = rig.gpu()
    fn = rig.kernel(rig.cupy, which).step
    isv0, buf, pool = isv_pool(rig)

    def launches(isv, stream):
        for _ in range(GRAPH_STEPS):
            fn((1,), (1,), (isv,), stream=stream)

    want = expected_isv(rig.contract, which, isv0, np.full(GRAPH_STEPS, KL_HIGH))
    graphs, stream, ok = _pool_graphs(cp, pool, launches, want)
    turn = itertools.cycle(graphs)
    return Bench(lambda: next(turn).launch(stream), len(graphs), GRAPH_STEPS, ok, {"isv_addresses": len(pool)},
                 stream=stream, hold=buf)  # the graphs hold addresses only


# ------------------------------------------------------------------ the looped harness


def looped_one(rig: Rig, which: str) -> Bench:
    _, cp = rig.gpu()
    kernel = rig.kernel(rig.cupy, which)
    lam0 = cp.asarray(np.array([0.1], dtype=F32))
    target = cp.asarray(np.array([TARGET], dtype=F32))
    trace = (0.02 * np.exp(np.random.default_rng(0).standard_normal((ONE_SCENARIO_STEPS, 1)))).astype(F32)
    kl = cp.asarray(chunked(trace))
    out = cp.empty_like(kl)
    kernel.run_private(lam0, kl, target, out)  # every round recomputes the same trace: check the first
    got = unchunked(cp.asnumpy(out))[:2000]
    ok = same(got, _expected_trace(rig, which, np.array([0.1], F32), trace[:2000]))
    return Bench(lambda: kernel.run_private(lam0, kl, target, out), 1, ONE_SCENARIO_STEPS, ok,
                 stream=cp.cuda.get_current_stream(), hold=(lam0, target, kl, out))


def looped_many(rig: Rig, which: str) -> Bench:
    _, cp = rig.gpu()
    kernel = rig.kernel(rig.cupy, which)
    rng = cp.random.default_rng(1)
    # generated directly in the harness's chunk-major layout [T/4, S, 4]
    kl = (0.02 * cp.exp(rng.standard_normal((MANY_STEPS // 4, MANY_RUNS, 4), dtype=cp.float32))).astype(cp.float32)
    lam0 = cp.full(MANY_RUNS, 0.1, dtype=cp.float32)
    target = cp.full(MANY_RUNS, TARGET, dtype=cp.float32)
    out = cp.empty_like(kl)
    moved = kl.nbytes + out.nbytes + lam0.nbytes + target.nbytes  # bytes the harness must move
    copy_gbs = copy_bandwidth_gbs(cp, kl.nbytes)
    kernel.run_private(lam0, kl, target, out)  # every round recomputes the same trace: check the first
    cols = slice(0, 64)
    got = unchunked(cp.asnumpy(out[:, cols]))
    ok = same(got, _expected_trace(rig, which, cp.asnumpy(lam0[cols]), unchunked(cp.asnumpy(kl[:, cols]))))
    return Bench(lambda: kernel.run_private(lam0, kl, target, out), 1, MANY_RUNS * MANY_STEPS, ok,
                 {"bytes_moved": moved, "copy_gbs": copy_gbs}, stream=cp.cuda.get_current_stream(),
                 hold=(lam0, target, kl, out))


def _expected_trace(rig: Rig, which: str, lam0: np.ndarray, kl: np.ndarray) -> np.ndarray:
    """λ after each step of a step-major trace on the spec model; the empty kernel keeps the seed."""
    if which == "empty":
        return np.broadcast_to(np.asarray(lam0, F32), kl.shape)
    return spec.run(spec.Rule.of(rig.contract.controller("fixed")), lam0, kl, TARGET)


# ------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class Mode:
    """One way to run the controller: what it measures, the clock pytest-benchmark reads, what sets its time."""

    name: str
    clock: str  # the clock, in words
    timer: Callable[[], float]  # the clock pytest-benchmark calls around each round (seconds)
    set_by: str  # "device": its work is timed on the GPU; "host": the CPU's call or launch path sets it
    what: str
    needs: str  # "host" or "cupy"
    rounds: int
    setup: Callable[[Rig, str], Bench]  # set up one kernel ("controller" or "empty") and check its bits

    @property
    def slug(self) -> str:
        """The name as a pytest id: lower case, words joined by '-'."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")


def _cupy_async(rig: Rig, which: str) -> Bench:
    return cupy_launch(rig, which, sync=False)


def _cupy_sync(rig: Rig, which: str) -> Bench:
    return cupy_launch(rig, which, sync=True)


MODES = (
    Mode("host ctypes call", WALL_PY, time.perf_counter, "host",
         f"one ctypes call of the CPU build, {HOST_CALLS} a round", "host", 100, host_call),
    Mode("cupy async launch", WALL_SYNCED, synced_clock, "host",
         f"Python enqueueing one (1,),(1,) launch through CuPy: {ASYNC_LAUNCHES} launches, one synchronise", "cupy",
         30, _cupy_async),
    Mode("cupy launch + sync", WALL_SYNCED, synced_clock, "host",
         "one CuPy launch and a stream synchronise: a loop that waits for λ", "cupy", 40, _cupy_sync),
    Mode("graph replay: controller", EVENTS, device_clock, "device",
         f"CUDA graphs of {GRAPH_STEPS} controller launches, one per ISV address ({ISV_POOL}), replayed; "
         "µs per node", "cupy", 30, graph_replay),
    Mode("looped harness, one scenario", EVENTS, device_clock, "device",
         "the controller inlined in a loop, one thread, 100k steps; µs per step", "cupy", 10, looped_one),
    Mode("looped harness, 1M scenarios", EVENTS, device_clock, "device",
         f"{MANY_RUNS >> 20}M threads × {MANY_STEPS} steps, one scenario each; µs per step (throughput)", "cupy", 10,
         looped_many),
)


def unavailable(mode: Mode, rig: Rig) -> str | None:
    """Why ``mode`` cannot run here (None when it can)."""
    if mode.needs == "host":
        return None if rig.host is not None else "host backend: not given to this run"
    return None if rig.cupy is not None else "cupy backend unavailable: needs CuPy and a CUDA device"
