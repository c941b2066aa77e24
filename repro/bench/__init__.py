"""The launch-overhead benchmark: what the controller costs per training step, each mode beside an empty kernel.

``measure(contract, ...)`` runs the modes of :mod:`repro.bench.modes` that this
machine can run and returns a :class:`Run`; ``analysis.cli.bench`` gates it
against a saved baseline and ``tests/test_bench.py`` runs each mode once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from repro.backends import get_backend
from repro.bench.modes import MODES, WHICH, Mode, Rig, run_mode, sources, unavailable
from repro.bench.result import Run, Sample, frame, load_run, machine_info
from repro.core.contract import Contract
from repro.core.errors import BackendUnavailable
from repro.core.kernel_source import KernelSource

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
            controller: KernelSource | None = None, which: tuple[str, ...] = WHICH,
            progress: Callable[[str], None] | None = None) -> Run:
    """One benchmark run of ``modes`` on this machine (those it cannot run are listed in ``Run.skipped``).

    ``rounds`` picks each mode's timed rounds (default: the mode's own); ``controller`` replaces the
    fixed controller's source (e.g. :func:`slowed`).
    """
    rig = make_rig(contract, controller)
    samples, skipped, errors = [], {}, {}
    for mode in modes:
        why = unavailable(mode, rig)
        if why:
            skipped[mode.name] = why
            continue
        if progress:
            progress(mode.name)
        try:
            samples += run_mode(mode, rig, which, rounds(mode) if rounds else mode.rounds)
        except Exception as err:  # one broken mode must not cost the others; the run carries the error
            errors[mode.name] = f"{type(err).__name__}: {err}".splitlines()[0]
    return Run(machine_info(_gpu_info(rig)), samples, skipped, errors)


def make_rig(contract: Contract, controller: KernelSource | None = None) -> Rig:
    """The kernels and backends the modes share: host and cupy where each runs here."""
    rig = Rig(contract, sources(contract, controller))
    for name in ("host", "cupy"):
        with contextlib.suppress(BackendUnavailable):  # modes that need it are skipped with the reason
            setattr(rig, name, get_backend(name))
    return rig


def _gpu_info(rig: Rig) -> dict | None:
    if rig.cupy is None:
        return None
    cp = rig.cupy.cp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return {"name": name, "cuda_driver_api": cp.cuda.runtime.driverGetVersion(),
            "runtime": cp.cuda.runtime.runtimeGetVersion(), "cupy": cp.__version__,
            "sm_clock_khz": int(cp.cuda.Device().attributes.get("ClockRate", 0))}


__all__ = ["MODES", "WHICH", "Mode", "Run", "Sample", "frame", "load_run", "make_rig", "measure", "run_mode", "slowed",
           "unavailable"]
