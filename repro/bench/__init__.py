"""The launch-overhead benchmark: what the controller costs per training step, each mode beside an empty kernel.

Each mode × kernel is a pytest-benchmark benchmark in ``tests/test_bench.py``, timed by the clock its mode names
(its JSON is the saved format); ``python -m analysis bench`` runs them and gates the run against a saved baseline.
``measure(contract, ...)`` times the same rounds with the same clocks, for tests that judge runs without
pytest-benchmark.
"""

from __future__ import annotations

import contextlib
import platform
import re
from collections.abc import Callable

from repro.backends import backend_unavailable, get_backend
from repro.backends.host import cpu_model
from repro.bench.modes import MODES, WHICH, Bench, Mode, Rig, Sample, info, sources, time_rounds, unavailable
from repro.core.contract import Contract
from repro.core.errors import BackendUnavailable
from repro.core.kernel_source import KernelSource

SLOW_NS_MAX = 100_000  # ns: the longest deliberate spin (2000 calls × 100 rounds of host ctypes call: 20 s a kernel)
ROUNDS_MAX = 10_000  # timed rounds a mode may be asked for

#: Defines the slowed controller's spin; NVRTC defines __CUDA_ARCH__, the host build does not.
_SPIN = r"""#ifdef __CUDA_ARCH__
__device__ static void rlq_spin(void) {  /* about RLQ_SPIN_NS ns of SM cycles */
    const long long start = clock64();
    while (clock64() - start < RLQ_SPIN_CYCLES) { }
}
#else
#include <time.h>
static void rlq_spin(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do { clock_gettime(CLOCK_MONOTONIC, &b); }
    while ((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec) < RLQ_SPIN_NS);
}
#endif
"""


def slowed(source: KernelSource, ns: int, sm_clock_khz: int = 1_980_000) -> KernelSource:
    """``source`` with a busy wait of about ``ns`` ns at the top of the controller (a deliberate regression).

    On the GPU the wait counts SM cycles at ``sm_clock_khz``; on the host it reads the monotonic clock.
    """
    cycles = max(1, ns * sm_clock_khz // 1_000_000)
    head = f"#define RLQ_SPIN_NS {ns}LL\n#define RLQ_SPIN_CYCLES {cycles}LL\n{_SPIN}"
    signature = f'extern "C" __global__ void {source.symbol}('
    body_start = source.text.index("{", source.text.index(signature)) + 1
    first = source.text[source.text.index(signature):body_start]
    return (source.with_edit(signature, head + signature, f"spin {ns} ns")
            .with_edit(first, first + "\n    rlq_spin();", "spin call"))


def measure(contract: Contract, modes: tuple[Mode, ...] = MODES, rounds: Callable[[Mode], int] | None = None,
            controller: KernelSource | None = None) -> list[Sample]:
    """The samples of ``modes`` that this machine can run (the others are left out), both kernels, in one process.

    ``rounds`` picks each mode's timed rounds (default: the mode's own); ``controller`` replaces the
    fixed controller's source (e.g. :func:`slowed`).
    """
    rig = make_rig(contract, controller)
    return [time_rounds(mode, rig, which, rounds(mode) if rounds else mode.rounds)
            for mode in modes if not unavailable(mode, rig) for which in WHICH]


def make_rig(contract: Contract, controller: KernelSource | None = None) -> Rig:
    """The kernels and backends the modes share: host and cupy where each runs here."""
    rig = Rig(contract, sources(contract, controller))
    for name in ("host", "cupy"):  # the modes time these two backends' own call and launch paths
        with contextlib.suppress(BackendUnavailable):  # modes that need it are skipped with the reason
            setattr(rig, name, get_backend(name))
    return rig


def gpu_info() -> dict | None:
    """The GPU the cupy backend uses (name, CUDA driver API and runtime versions, CuPy, SM clock in kHz); None without."""
    if backend_unavailable("cupy") is not None:
        return None
    backend = get_backend("cupy")
    cp = backend.cp
    return {"name": backend.device_name(), "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
            "runtime": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__,
            "sm_clock_khz": int(cp.cuda.Device().attributes.get("ClockRate", 0))}


def machine_tag(gpu: dict | None = None) -> str:
    """A file-name-safe name of what the benchmark times: the GPU where there is one (``gpu_info()``), else the CPU.

    Baselines are kept per tag (``reports/bench/baselines/<tag>/``); pytest-benchmark's JSON records it as
    ``machine_info["rlq_machine"]``.
    """
    gpu = gpu if gpu is not None else gpu_info()
    name = gpu["name"] if gpu else cpu_model(platform.processor() or "CPU")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unknown"


__all__ = ["MODES", "WHICH", "Bench", "Mode", "Sample", "gpu_info", "info", "machine_tag", "make_rig", "measure",
           "slowed", "time_rounds", "unavailable"]
