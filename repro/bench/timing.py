"""GPU timing primitives for the benchmark: CUDA events, graph capture, copy bandwidth.

Times are in µs unless a name says otherwise. Every function synchronises
what it times; none includes module load or NVRTC compilation (callers warm up).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

#: The training loop's feed: KL EMA update from a fresh KL value, as a loop would run it before the controller.
FEED_EMA = r"""
extern "C" __global__ void rlq_feed_ema(float* __restrict__ isv, const float* __restrict__ kl_new, float alpha) {
    isv[RLQ_KL_SLOT] = (1.0f - alpha) * isv[RLQ_KL_SLOT] + alpha * kl_new[0];
}
"""


#: A small step of a training loop (256 threads, one block): the other nodes of the graph-of-kernels mode.
SMALL_OP = r"""
extern "C" __global__ void rlq_small_op(float* __restrict__ x) {
    x[threadIdx.x] = x[threadIdx.x] * 0.999f + 0.001f;
}
"""


def wall_time_us(work: Callable[[], None]) -> float:
    """Host wall-clock time (µs) of ``work`` (which must synchronise what it enqueues itself)."""
    start = time.perf_counter_ns()
    work()
    return (time.perf_counter_ns() - start) / 1e3


def event_time_us(cp, work: Callable[[], None], stream=None) -> float:
    """Device time (µs) between CUDA events recorded around ``work`` on ``stream``."""
    stream = stream or cp.cuda.get_current_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record(stream)
    work()
    end.record(stream)
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e3


def capture_graph(cp, launches: Callable[[object], None]):
    """A CUDA graph of what ``launches(stream)`` enqueues (captured on a stream of its own, not run)."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        launches(stream)
        return stream.end_capture()


def copy_bandwidth_gbs(cp, nbytes: int, repeats: int = 5) -> float:
    """Device-to-device copy bandwidth (GB/s, bytes read + written), best of ``repeats``."""
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    cp.copyto(dst, src)  # warm-up
    best = min(event_time_us(cp, lambda: cp.copyto(dst, src)) for _ in range(repeats))
    return 2 * src.nbytes / (best * 1e-6) / 1e9


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and the half-width of its two-sided 95 % Student-t confidence interval (same unit).

    One value has no spread to speak of: its half-width is inf.
    """
    from scipy.special import stdtrit  # Student t's quantile; scipy.stats costs seconds to import

    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, math.inf
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stdtrit(n - 1, 0.975)) * sd / math.sqrt(n)


# pytest-benchmark's clock for the suite's benchmarks: each round is timed by the mode's own clock (CUDA
# events, or the wall clock around the work), which hands the round's µs to advance(); the benchmark's
# timer reads this counter, so the stats pytest-benchmark stores are those rounds (in s per step).
_clock_s = 0.0


def round_clock() -> float:
    """Seconds: the sum of every round handed to :func:`advance` so far (pytest-benchmark's ``timer``)."""
    return _clock_s


def advance(us: float) -> None:
    """Move :func:`round_clock` on by one round's ``us`` µs (per step)."""
    global _clock_s
    _clock_s += us * 1e-6
