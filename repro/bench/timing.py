"""Timing for the benchmark: the clocks pytest-benchmark calls, CUDA events, graph capture, copy bandwidth.

Times are in µs unless a name says otherwise. Every function synchronises
what it times; none includes module load or NVRTC compilation (callers warm up).
"""

from __future__ import annotations

import time
from collections.abc import Callable


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


# The benchmarks' clocks: pytest-benchmark calls one before and after each round (``@pytest.mark.benchmark(timer=…)``,
# tests/test_bench.py) and stores the difference. Each reads a real clock when it is called.


def synced_clock() -> float:
    """Seconds on the host's monotonic clock, read once the current CuPy stream has finished what it was given.

    A round's end therefore includes the device's completion of what the round enqueued (a launch loop that
    does not wait itself); its start waits for nothing but the previous round.
    """
    import cupy

    cupy.cuda.get_current_stream().synchronize()
    return time.perf_counter()


_device = {"last": None, "total": 0.0}


def device_clock() -> float:
    """Seconds on the GPU's timeline: a CUDA event recorded on the current CuPy stream and waited for.

    The clock is the sum, in float64, of the intervals between consecutive events (each an elapsed time the
    driver measures between two events, a float32 count of ms: summing short intervals keeps its precision).
    Two readings around a round give the device time from the first event to the completion of the round's work.
    """
    import cupy

    event = cupy.cuda.Event()
    event.record()
    event.synchronize()
    if _device["last"] is not None:
        _device["total"] += cupy.cuda.get_elapsed_time(_device["last"], event) * 1e-3
    _device["last"] = event
    return _device["total"]
