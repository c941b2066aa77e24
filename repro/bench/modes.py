"""The benchmark's modes: how a training loop can run the controller, each timed beside an empty-kernel twin.

Every mode function takes a rig (the compiled kernels and device state the
modes share) and a kernel name (``controller`` or ``empty``), sets the kernel
up and returns a :class:`Timed` whose rounds :func:`run_mode` times, the two
kernels' rounds in turn, into :class:`Sample` rows of µs per step. Warm-up runs
first everywhere (module load and NVRTC stay out of the numbers), and the ISV
is never zero: sentinel bits, a valid λ, KL above the band (the ramp branch
runs) and a target. Each mode also checks that the path it times computes the
spec model's bits (``extra["matches_spec"]``): a timing of wrong code is no
benchmark.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from repro.backends import Backend
from repro.backends.base import chunked, unchunked
from repro.backends.translation_unit import KERNELS
from repro.bench.timing import FEED_EMA, SMALL_OP, capture_graph, copy_bandwidth_gbs, event_time_us, mean_ci95, wall_time_us
from repro.core import spec
from repro.core.contract import Contract
from repro.core.errors import BackendUnavailable, SuiteError, unavailable_reason
from repro.core.f32 import F32, same
from repro.core.isv import new_isv
from repro.core.kernel_source import KernelSource, load_kernel

WHICH = ("controller", "empty")
VERIFY_STEPS = 16  # launches per correctness check: 13 ramp steps reach the ceiling, the rest are clamped
KL_HIGH, TARGET, FEED_ALPHA = F32(0.5), F32(0.02), F32(0.1)

HOST_CALLS = 2000  # ctypes calls per timed round
ASYNC_LAUNCHES = 2000  # launches per timed round, one synchronisation at its end
SYNC_LAUNCHES = 200  # launch + synchronise pairs per timed round
EVENT_LAUNCHES = 5000
GRAPH_STEPS = 500  # controller nodes per graph; a timed round replays each of the ISV_POOL graphs once
STEP_NODES, STEP_REPLAYS = 64, 64  # small kernels per training-step graph; replays per timed window (4 per round)
STEP_EXTRA = 16  # nodes of the kernel added to the step; their extra time / STEP_EXTRA is one node's
#: Device modes spread the controller's ISV over this many addresses, each in its own 2 MiB page at its own
#: offset: the latency of one thread's load/store depends on where the line lands (the L2 partition), so a
#: single address per process made "graph replay: controller" move 10 % between runs; a round covers all of them.
ISV_POOL, POOL_STRIDE = 16, (2 << 20) + 4352  # ISVs, bytes between two of them
ONE_SCENARIO_STEPS = 100_000
MANY_RUNS, MANY_STEPS = 1 << 20, 256

EVENTS, WALL_PY, WALL_C = "CUDA events", "wall clock (Python)", "wall clock (C)"


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

    def helper(self, name: str, code: str):
        if name not in self.cache:
            defs = f"#define RLQ_KL_SLOT {self.contract.slots.kl}\n"
            self.cache[name] = self.gpu()[0].helper_module(defs + code, f"{name} kernel").get_function(name)
        return self.cache[name]


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
class Sample:
    """One mode with one kernel (``controller`` or ``empty``): µs per step in each timed round, and what they are.

    ``info()`` is what a benchmark stores in pytest-benchmark's ``extra_info``; ``summary()`` the row the gate
    reads (pytest-benchmark's stats of the same rounds, in µs).
    """

    mode: str
    kernel: str
    clock: str  # "CUDA events", "wall clock (Python)" or "wall clock (C)"
    set_by: str  # "device" or "host"
    what: str  # what the mode measures, in words
    steps_per_round: int
    us: list[float]
    extra: dict = field(default_factory=dict)

    def info(self) -> dict:
        return {"mode": self.mode, "kernel": self.kernel, "clock": self.clock, "set_by": self.set_by,
                "what": self.what, "steps_per_round": self.steps_per_round, **self.extra}

    def summary(self) -> dict:
        per = np.asarray(self.us, dtype=float)
        q1, med, q3 = np.percentile(per, [25, 50, 75])
        return {**self.info(), "median_us": med, "q1_us": q1, "q3_us": q3, "min_us": per.min(), "max_us": per.max(),
                "rounds": len(per)}


@dataclass
class Timed:
    """One mode × kernel, set up and checked: ``round()`` times one round (µs per step)."""

    round: Callable[[], float]
    steps: int  # steps one round holds
    ok: bool  # the timed path computed the spec model's bits
    extra: Callable[[list[float]], dict] = lambda us: {}
    warmup: int = 2
    hold: object = None  # what the rounds use only through raw addresses (arrays, graphs' buffers, parameters)


def run_mode(mode: Mode, rig: Rig, which: tuple[str, ...], rounds: int) -> list[Sample]:
    """Set up every kernel of ``mode``, then time their rounds interleaved: A B, B A, A B, ... (A/B = the kernels).

    Interleaving puts both kernels under the same host and device conditions, and reversing the order
    every other round cancels a linear drift and any first-or-second effect, so the controller − empty
    difference of one run (``extra["diff_us"]``, mean of the paired rounds, with its 95 % confidence
    half-width ``extra["diff_ci95_us"]``, µs per step) does not carry the drift between two stretches of time.
    """
    timed = {w: mode.measure(mode, rig, w, rounds) for w in which}
    for _ in range(max(t.warmup for t in timed.values())):
        for t in timed.values():
            if t.warmup:
                t.round()
    us: dict[str, list[float]] = {w: [] for w in which}
    order = list(timed.items())
    for r in range(rounds):
        for w, t in order if r % 2 == 0 else order[::-1]:
            us[w].append(t.round())
    samples = [Sample(mode.name, w, mode.clock, mode.set_by, mode.what, t.steps, us[w],
                      {"matches_spec": t.ok, **t.extra(us[w])}) for w, t in timed.items()]
    if set(which) == set(WHICH):
        diff = np.subtract(us["controller"], us["empty"])
        mean, half = mean_ci95(diff)
        for s in samples:
            s.extra.update(diff_us=mean, diff_ci95_us=half)
    return samples


def _verified(rig: Rig, which: str, isv: np.ndarray) -> bool:
    """Whether ``isv``, a live ISV after VERIFY_STEPS steps of ``which``, holds the spec model's bits."""
    return same(isv, expected_isv(rig.contract, which, live_isv(rig.contract), np.full(VERIFY_STEPS, KL_HIGH)))


def _precomputed(values: list[float]) -> Callable[[], float]:
    """Rounds a separate program already timed, handed out one by one."""
    it = iter(values)
    return lambda: next(it)


# ------------------------------------------------------------------ host


def host_call(mode: Mode, rig: Rig, which: str, rounds: int) -> Timed:
    kernel = rig.kernel(rig.host, which)
    check = live_isv(rig.contract)
    for _ in range(VERIFY_STEPS):
        kernel.step(check.ctypes.data)
    ok = _verified(rig, which, check)
    isv = live_isv(rig.contract)
    step, addr = kernel.step, isv.ctypes.data

    def calls():
        for _ in range(HOST_CALLS):
            step(addr)

    return Timed(lambda: wall_time_us(calls) / HOST_CALLS, HOST_CALLS, ok, hold=isv)


# ------------------------------------------------------------------ CuPy, one launch per step


def _device_check(rig: Rig, which: str, run_steps: Callable[[object, int], None]) -> bool:
    """Run VERIFY_STEPS steps through a launch path on a fresh device ISV; compare with the spec."""
    _, cp = rig.gpu()
    isv = cp.asarray(live_isv(rig.contract))
    run_steps(isv, VERIFY_STEPS)
    cp.cuda.Device().synchronize()
    return _verified(rig, which, cp.asnumpy(isv))


def _cupy_setup(rig: Rig, which: str):
    """CuPy and the kernel's launch, whether its launches compute the spec's bits, and a live device ISV."""
    _, cp = rig.gpu()
    fn = rig.kernel(rig.cupy, which).step

    def launches(isv, n):
        for _ in range(n):
            fn((1,), (1,), (isv,))

    return cp, fn, launches, _device_check(rig, which, launches), cp.asarray(live_isv(rig.contract))


def cupy_wall(mode: Mode, rig: Rig, which: str, rounds: int, timed: str) -> Timed:
    """CuPy's ``async`` launches (one synchronise at the end) or ``sync`` launch + synchronise pairs, wall-clocked."""
    cp, fn, _, ok, isv = _cupy_setup(rig, which)
    stream = cp.cuda.get_current_stream()

    def enqueue():
        for _ in range(ASYNC_LAUNCHES):
            fn((1,), (1,), (isv,))
        stream.synchronize()

    def pairs():
        for _ in range(SYNC_LAUNCHES):
            fn((1,), (1,), (isv,))
            stream.synchronize()

    work, steps = (enqueue, ASYNC_LAUNCHES) if timed == "async" else (pairs, SYNC_LAUNCHES)
    return Timed(lambda: wall_time_us(work) / steps, steps, ok, hold=isv)


def cupy_events(mode: Mode, rig: Rig, which: str, rounds: int) -> Timed:
    cp, _, launches, ok, isv = _cupy_setup(rig, which)
    return Timed(lambda: event_time_us(cp, lambda: launches(isv, EVENT_LAUNCHES)) / EVENT_LAUNCHES, EVENT_LAUNCHES, ok)


# ------------------------------------------------------------------ native launchers


def c_loop(mode: Mode, rig: Rig, which: str, rounds: int, timed: str) -> Timed:
    """The C driver-API loop's ``async`` or ``sync`` rounds for ``which``: both modes come from one run of it."""
    from repro.bench import native

    key = ("native", which, rounds)
    if key not in rig.cache:
        kernel = rig.kernel(rig.cupy, which)
        rig.cache[key] = native.run(kernel.image, rig.sources[which].symbol, live_isv(rig.contract),
                                    rounds=rounds, async_launches=ASYNC_LAUNCHES, sync_launches=SYNC_LAUNCHES,
                                    verify_steps=VERIFY_STEPS)
    done = rig.cache[key]
    steps = ASYNC_LAUNCHES if timed == "async" else SYNC_LAUNCHES
    # the rounds the C program already timed, handed out one by one
    return Timed(_precomputed(done[f"{timed}_us"]), steps, _verified(rig, which, done["isv"]), warmup=0)


def _bindings():
    try:
        from cuda.bindings import driver
    except Exception as err:  # ImportError, or a driver library that fails to load
        raise BackendUnavailable(f"cuda.bindings does not import ({type(err).__name__}: {err})") from None
    return driver


def bindings_async(mode: Mode, rig: Rig, which: str, rounds: int) -> Timed:
    _, cp = rig.gpu()
    cu = _bindings()

    def ok_or_raise(result):
        err, *rest = result if isinstance(result, tuple) else (result,)
        if err != cu.CUresult.CUDA_SUCCESS:
            raise SuiteError(f"cuda.bindings: {err!r}")
        return rest[0] if len(rest) == 1 else rest

    kernel = rig.kernel(rig.cupy, which)
    ok_or_raise(cu.cuInit(0))
    ctx = ok_or_raise(cu.cuDevicePrimaryCtxRetain(ok_or_raise(cu.cuDeviceGet(cp.cuda.Device().id))))
    ok_or_raise(cu.cuCtxSetCurrent(ctx))  # the primary context, the one CuPy uses
    image = np.frombuffer(kernel.image, dtype=np.uint8)
    module = ok_or_raise(cu.cuModuleLoadData(image.ctypes.data))
    fn = ok_or_raise(cu.cuModuleGetFunction(module, rig.sources[which].symbol.encode()))
    stream = ok_or_raise(cu.cuStreamCreate(1))  # CU_STREAM_NON_BLOCKING
    keep = []  # argument storage must outlive the launches

    def params_of(isv) -> int:
        arg = ctypes.c_void_p(isv.data.ptr)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        keep.append((arg, params))
        return ctypes.addressof(params)

    launch, sync = cu.cuLaunchKernel, cu.cuStreamSynchronize

    def launches(isv, n):
        p = params_of(isv)
        for _ in range(n):
            launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, p, 0)
        ok_or_raise(sync(stream))

    ok = _device_check(rig, which, launches)
    isv = cp.asarray(live_isv(rig.contract))
    p = params_of(isv)  # an address: the argument storage must outlive the rounds (Timed.hold)
    ok_or_raise(launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, p, 0))

    def enqueue():
        for _ in range(ASYNC_LAUNCHES):
            launch(fn, 1, 1, 1, 1, 1, 1, 0, stream, p, 0)
        sync(stream)

    return Timed(lambda: wall_time_us(enqueue) / ASYNC_LAUNCHES, ASYNC_LAUNCHES, ok, hold=(isv, keep, module, stream))


# ------------------------------------------------------------------ CUDA graphs


def _replay_us(cp, graphs: list, stream, replays: int) -> float:
    """Device time (µs) of ``replays`` replays of each graph in ``graphs``, back to back on ``stream``."""
    def work():
        for _ in range(replays):
            for g in graphs:
                g.launch(stream)

    return event_time_us(cp, work, stream)


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


def graph_replay(mode: Mode, rig: Rig, which: str, rounds: int, with_feed: bool) -> Timed:
    _, cp = rig.gpu()
    fn = rig.kernel(rig.cupy, which).step
    feed = rig.helper("rlq_feed_ema", FEED_EMA) if with_feed else None
    isv0, buf, pool = isv_pool(rig)
    kl_new = cp.asarray(np.array([KL_HIGH], dtype=F32))
    cp.cuda.Device().synchronize()

    def launches(isv, stream):
        for _ in range(GRAPH_STEPS):
            if feed is not None:
                feed((1,), (1,), (isv, kl_new, FEED_ALPHA), stream=stream)
            fn((1,), (1,), (isv,), stream=stream)

    kl = np.full(GRAPH_STEPS, KL_HIGH)
    if feed is not None:  # the feed's EMA in float32, as the kernel computes it (no FMA contraction)
        ema = isv0[rig.contract.slots.kl]
        for t in range(GRAPH_STEPS):
            ema = F32(F32(F32(1) - FEED_ALPHA) * ema) + F32(FEED_ALPHA * KL_HIGH)
            kl[t] = ema
    graphs, stream, ok = _pool_graphs(cp, pool, launches, expected_isv(rig.contract, which, isv0, kl))
    nodes = len(graphs) * GRAPH_STEPS
    return Timed(lambda: _replay_us(cp, graphs, stream, 1) / nodes, nodes, ok,
                 lambda us: {"isv_addresses": len(pool)}, hold=(buf, kl_new))  # the graphs hold addresses only


def graph_step(mode: Mode, rig: Rig, which: str, rounds: int) -> Timed:
    """A training step as one graph of 64 small kernels, and the same step with ``STEP_EXTRA`` more nodes of the kernel.

    A round times four windows of ``STEP_REPLAYS`` replays, without / with / with / without the nodes (the
    with-node windows cycle through one graph per pooled ISV address; the bare graph and the small kernels'
    buffer are the rig's, shared by both kernels), and returns (mean with-node step − mean bare step) /
    ``STEP_EXTRA``: µs one node adds to a step, a linear drift within the round cancelled. One node's
    difference alone (≈ 1 µs in a 58 µs step) moved 30 % between processes on the H200, an offset
    between two graph instances; over ``STEP_EXTRA`` nodes such an offset weighs 1/``STEP_EXTRA``.
    """
    _, cp = rig.gpu()
    fn = rig.kernel(rig.cupy, which).step
    small = rig.helper("rlq_small_op", SMALL_OP)
    if "step_bare" not in rig.cache:
        work = cp.ones(256, dtype=cp.float32)
        cp.cuda.Device().synchronize()  # filled on the current stream; the graphs replay on non-blocking ones
        rig.cache["step_bare"] = work, capture_graph(cp, lambda stream: [small((1,), (256,), (work,), stream=stream)
                                                                          for _ in range(STEP_NODES)])
    work, bare = rig.cache["step_bare"]
    isv0, buf, pool = isv_pool(rig)

    def launches(isv, stream):
        for _ in range(STEP_NODES):
            small((1,), (256,), (work,), stream=stream)
        for _ in range(STEP_EXTRA):
            fn((1,), (1,), (isv,), stream=stream)

    want = expected_isv(rig.contract, which, isv0, np.full(STEP_EXTRA, KL_HIGH))
    with_node, stream, ok = _pool_graphs(cp, pool, launches, want)
    per = STEP_REPLAYS // len(with_node)  # replays of each with-node graph in a window
    bare_us = []

    def marginal() -> float:
        b1 = _replay_us(cp, [bare], stream, STEP_REPLAYS) / STEP_REPLAYS
        w1 = _replay_us(cp, with_node, stream, per) / (per * len(with_node))
        w2 = _replay_us(cp, with_node, stream, per) / (per * len(with_node))
        b2 = _replay_us(cp, [bare], stream, STEP_REPLAYS) / STEP_REPLAYS
        bare_us.append((b1 + b2) / 2)
        return (w1 + w2 - b1 - b2) / 2 / STEP_EXTRA

    return Timed(marginal, 2 * STEP_REPLAYS, ok,
                 lambda us: {"step_us": float(np.median(bare_us)), "nodes": STEP_NODES, "extra_nodes": STEP_EXTRA,
                             "isv_addresses": len(pool)},
                 hold=(buf, work))  # the graphs hold their addresses only


# ------------------------------------------------------------------ the looped harness


def looped_one(mode: Mode, rig: Rig, which: str, rounds: int) -> Timed:
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
    return Timed(lambda: event_time_us(cp, lambda: kernel.run_private(lam0, kl, target, out)) / ONE_SCENARIO_STEPS,
                 ONE_SCENARIO_STEPS, ok)


def looped_many(mode: Mode, rig: Rig, which: str, rounds: int) -> Timed:
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
    steps = MANY_RUNS * MANY_STEPS
    kernel.run_private(lam0, kl, target, out)  # every round recomputes the same trace: check the first
    cols = slice(0, 64)
    got = unchunked(cp.asnumpy(out[:, cols]))
    ok = same(got, _expected_trace(rig, which, cp.asnumpy(lam0[cols]), unchunked(cp.asnumpy(kl[:, cols]))))

    def throughput(us: list[float]) -> dict:
        best_s = min(us) * steps * 1e-6
        achieved = moved / best_s / 1e9
        return {"steps_per_s": steps / best_s, "bytes_moved": moved, "achieved_gbs": achieved, "copy_gbs": copy_gbs,
                "copy_fraction": achieved / copy_gbs}

    return Timed(lambda: event_time_us(cp, lambda: kernel.run_private(lam0, kl, target, out)) / steps, steps, ok,
                 throughput)


def _expected_trace(rig: Rig, which: str, lam0: np.ndarray, kl: np.ndarray) -> np.ndarray:
    """λ after each step of a step-major trace on the spec model; the empty kernel keeps the seed."""
    if which == "empty":
        return np.broadcast_to(np.asarray(lam0, F32), kl.shape)
    return spec.run(spec.Rule.of(rig.contract.controller("fixed")), lam0, kl, TARGET)


# ------------------------------------------------------------------ the registry


@dataclass(frozen=True)
class Mode:
    """One way to run the controller: what it measures, which clock, and what sets its time."""

    name: str
    clock: str
    set_by: str  # "device": its work is timed on the GPU; "host": the CPU's call or launch path sets it
    what: str
    needs: str  # "host", "cupy", "native" (C compiler + libcuda) or "bindings" (cuda.bindings)
    rounds: int
    measure: Callable[[Mode, Rig, str, int], Timed]  # set up one kernel (rounds: for programs that time their own)
    # Its part in the report's notes: a launch path from Python (named so there) set beside the C loop's launch,
    # the C loop itself, or the training step's one more graph node.
    python_launch: str = ""
    c_launch: bool = False
    step_node: bool = False

    @property
    def slug(self) -> str:
        """The name as a pytest id: lower case, words joined by '-'."""
        return re.sub(r"[^a-z0-9]+", "-", self.name.lower()).strip("-")


MODES = (
    Mode("host ctypes call", WALL_PY, "host", f"one ctypes call of the CPU build, in a Python loop of {HOST_CALLS}",
         "host", 100, host_call),
    Mode("cupy async launch", WALL_PY, "host",
         f"Python enqueueing one (1,),(1,) launch through CuPy: {ASYNC_LAUNCHES} launches, one synchronise", "cupy",
         30, partial(cupy_wall, timed="async"), python_launch="cupy"),
    Mode("cupy launch + sync", WALL_PY, "host", "one CuPy launch and a stream synchronise: a loop that waits for λ",
         "cupy", 40, partial(cupy_wall, timed="sync")),
    Mode("C driver API async launch", WALL_C, "host",
         f"cuLaunchKernel of the same CUBIN from a C loop: {ASYNC_LAUNCHES} launches, one synchronise", "native", 30,
         partial(c_loop, timed="async"), c_launch=True),
    Mode("C driver API launch + sync", WALL_C, "host", "cuLaunchKernel and cuStreamSynchronize from a C loop",
         "native", 30, partial(c_loop, timed="sync")),
    Mode("cuda.bindings async launch", WALL_PY, "host",
         f"cuLaunchKernel of the same CUBIN through cuda.bindings from Python: {ASYNC_LAUNCHES} launches", "bindings",
         30, bindings_async, python_launch="cuda.bindings"),
    Mode("CUDA events around enqueued launches", EVENTS, "host",
         f"events around {EVENT_LAUNCHES} CuPy launches; the GPU waits for Python, so the host sets it", "cupy", 15,
         cupy_events),
    Mode("graph replay: controller", EVENTS, "device",
         f"CUDA graphs of {GRAPH_STEPS} controller launches, one per ISV address ({ISV_POOL}), replayed; "
         "µs per node", "cupy", 30, partial(graph_replay, with_feed=False)),
    Mode("graph replay: feed + controller", EVENTS, "device",
         f"CUDA graphs of {GRAPH_STEPS} (KL feed, controller) pairs, one per ISV address ({ISV_POOL}), replayed; "
         "µs per pair", "cupy", 30, partial(graph_replay, with_feed=True)),
    Mode(f"graph of {STEP_NODES} kernels: controller node", EVENTS, "device",
         f"what one more node adds to a training step graphed as {STEP_NODES} small kernels "
         f"(steps with {STEP_EXTRA} more nodes minus steps without, interleaved in each round, / {STEP_EXTRA})", "cupy",
         60, graph_step, step_node=True),
    Mode("looped harness, one scenario", EVENTS, "device",
         "the controller inlined in a loop, one thread, 100k steps; µs per step", "cupy", 10, looped_one),
    Mode("looped harness, 1M scenarios", EVENTS, "device",
         f"{MANY_RUNS >> 20}M threads × {MANY_STEPS} steps, one scenario each; µs per step (throughput)", "cupy", 10,
         looped_many),
)


def unavailable(mode: Mode, rig: Rig) -> str | None:
    """Why ``mode`` cannot run here (None when it can)."""
    if mode.needs == "host":
        return None if rig.host is not None else "host backend: not given to this run"
    if rig.cupy is None:
        return "cupy backend unavailable: needs CuPy and a CUDA device"
    if mode.needs == "native":
        from repro.bench import native

        return native.launcher_unavailable()
    return unavailable_reason(_bindings) if mode.needs == "bindings" else None
