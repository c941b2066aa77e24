"""The one way evidence is gathered for any controller: compile, isolated runs, coverage, static rules, sanitizer.

:func:`gather` returns :class:`repro.runners.evidence.Evidence`; every judgement
(``analysis.judge``) is a pure function of it. The gate, the report and the
tests call it alike. Limits are derived from the reference kernel (the
contract entry's own kernel) timed in the same run (see
:mod:`repro.runners.isolation`); in one process the reference's times are
reused for :data:`REFERENCE_TTL` s, and a candidate that *is* the reference
takes the reference's results instead of running twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from repro.backends import Backend, device_view, get_backend, host_state, ptx
from repro.backends.translation_unit import harness_defines
from repro.core.contract import Controller, Slots
from repro.core.errors import BackendUnavailable
from repro.core.kernel_source import KernelSource, load_kernel
from repro.runners import coverage as cov
from repro.runners import sanitize as san
from repro.runners.campaign import assemble, collect
from repro.runners.evidence import GROUPS, Evidence, Fault
from repro.runners.inference import infer
from repro.runners.isolation import (
    INFERENCE,
    Clock,
    collect_isolated,
    derive_budget,
    reference_limits,
    start_server,
    time_reference,
)

#: s per launch path under compute-sanitizer (asked for explicitly; slow by nature, outside the budget).
SANITIZER_TIMEOUT = 600.0

#: s a reference timing is reused for (in one process: the report, a test session): the machine's load moves.
REFERENCE_TTL = 60.0

_REFERENCE: dict[tuple, tuple[float, object]] = {}  # key -> (when, the reference's times and results)


def _reference(key: tuple, measure: Callable[[], object]):
    """``measure()`` of the reference kernel, reused for :data:`REFERENCE_TTL` s under ``key``."""
    if key not in _REFERENCE or time.monotonic() - _REFERENCE[key][0] > REFERENCE_TTL:
        _REFERENCE[key] = (time.monotonic(), measure())
    return _REFERENCE[key][1]


def gather(backend: Backend, source: KernelSource, slots: Slots, controller: Controller, *,
           timeout: float | None = None, isolate: bool = True, static: bool = True, coverage: bool = True,
           inference: bool = False, sanitize: bool = False, seed: int = 0,
           progress: Callable[[str], None] | None = None) -> Evidence:
    """Everything measured on ``source`` under ``controller``'s contract.

    Compiles first (a compile error is the caller's to report: :class:`SuiteError`, exit 2). ``isolate``:
    the candidate's code runs in child processes only, each request under a limit (``timeout`` s: a
    fixed limit, the ``--timeout`` override; None: derived from the reference); ``isolate=False`` runs it
    here, unprotected (trusted kernels only). ``static``: the static checks of the source: the candidate
    preprocessed as the device compilers and the host build see it (the device_view row; needs the host's C++
    compiler), and NVRTC's PTX rules where NVRTC is installed.
    ``coverage``: gcov line and branch counts where g++ and gcov are. ``inference``: the rule the kernel
    behaves as. ``sanitize``: compute-sanitizer's memcheck and initcheck (needs a GPU). ``progress``
    receives one line per experiment group.
    """
    say = progress or (lambda _line: None)
    if isolate:
        start_server(backend.name)  # a GPU worker's forkserver imports CuPy while the checks below run
    slots = slots.with_state(controller.state)  # a stateful entry's own slots: seeded, and its writes allowed
    notes, unavailable = [], set()
    backend.check_compiles(source, slots)  # the backend's compiler speaks first on a broken source
    # The candidate as the device compilers and the host build preprocess it (a static check of the source, with
    # the PTX rules): subprocesses of the host's compiler, started now and read at the end (they overlap the runs;
    # nothing of the candidate runs in them).
    views, cxx = None, None
    if static:
        try:
            cxx = get_backend("host").cxx
        except BackendUnavailable as err:
            notes.append(f"device and host views not compared: {err}")
            unavailable.add("device_view")
    if cxx:
        pool = ThreadPoolExecutor(1)
        views = pool.submit(device_view.measure, cxx, source, harness_defines(source, slots))
        pool.shutdown(wait=False)
    static_report = None
    if static:  # a source NVRTC rejects is not CUDA (exit 2), whichever backend runs it
        reason = ptx.nvrtc_unavailable()
        if reason:
            notes.append(f"static checks not run: {reason}")
            unavailable.add("static")
        else:
            static_report = ptx.analyse(source)
    clock = Clock(None)
    ref = None  # the contract's own kernel, loaded once where limits are derived from its times
    if not isolate:
        kernel = backend.compile(source, slots)
        evidence = collect(kernel, controller, seed)
        if inference:
            evidence = replace(evidence, behaviour=infer(kernel, controller))
    elif timeout is not None:
        evidence = collect_isolated(backend, source, slots, controller, timeout, seed, inference, progress=progress)
    else:
        ref = load_kernel(controller.kernel, controller.symbol)
        start = time.perf_counter()
        # the entry's values, not its name, key the reuse: a --contracts file may give "fixed" other values
        times, results = _reference((backend.name, ref.sha256, repr(controller), seed, inference, slots),
                                    lambda: time_reference(backend, ref, slots, controller, seed, inference))
        say(f"reference {ref.origin}: {sum(times.values()):.2f} s in all (timed {time.perf_counter() - start:.2f} s ago)")
        budget = derive_budget(times)
        clock = Clock(budget)
        if ref.sha256 == source.sha256:  # the reference itself: its results are the candidate's
            _, limits = reference_limits(times, budget)
            evidence = assemble(controller, slots, {g: results[g] for g in GROUPS}, seed=seed,
                                behaviour=results.get(INFERENCE), limits=limits)
            for group in GROUPS:
                say(f"{group}: ran (the reference kernel itself)")
        else:
            evidence = collect_isolated(backend, source, slots, controller, None, seed, inference,
                                        reference=times, clock=clock, progress=progress)
    coverage_report = None
    if coverage:
        reason = cov.gcov_unavailable()  # the host backend's reason included
        if reason:
            notes.append(f"coverage not measured: {reason}")
            unavailable.add("coverage")
        else:
            host = get_backend("host")
            try:
                ref_times = None
                if timeout is None:
                    ref = ref or load_kernel(controller.kernel, controller.symbol)
                    ref_times = _reference(("coverage", ref.sha256, repr(controller), seed, slots),
                                           lambda: cov.reference_times(host, ref, slots, controller, seed))
                coverage_report = cov.measure(host, source, slots, controller, timeout, seed,
                                              skip=frozenset(f.group for f in evidence.faults),
                                              reference=ref_times, clock=clock, progress=progress,
                                              hung={name: why for _, name, why in evidence.skipped}
                                              | {f.scenario: f"it hung in {f.group}" for f in evidence.faults
                                                 if f.kind == "timeout" and f.scenario})
            except BackendUnavailable as err:
                notes.append(f"coverage not measured: {err}")
                unavailable.add("coverage")
            if coverage_report is not None and coverage_report.fault_lines():
                notes.append(f"coverage incomplete: {'; '.join(coverage_report.fault_lines())}")
    reports = None
    faults = list(evidence.faults)
    if sanitize:  # memcheck + initcheck (see repro/runners/sanitize.py); without a GPU: exit 2, as asked
        found, hung = san.sanitize_all(source, slots, timeout=SANITIZER_TIMEOUT)
        reports = tuple(found)
        faults += [Fault("sanitizer", f"{tool}, {path} path", "timeout", f"no answer within {SANITIZER_TIMEOUT:g} s")
                   for tool, path in hung]
        say(f"sanitizer: {len(reports)} report(s)" + (f", {len(hung)} hung" if hung else ""))
    approx = source.approximate_intrinsics()
    if approx:
        listed = ", ".join(f"{name} (line {line})" for name, line in approx)
        notes.append(f"approximate intrinsics {listed}: CPU and GPU results may differ in the last bits")
    return replace(evidence, static=static_report, coverage=coverage_report, sanitizer=reports, faults=faults,
                   device_views=views.result() if views is not None else None,
                   state=host_state.readable(evidence.state) if evidence.state is not None else None,
                   notes=tuple(notes), unavailable=frozenset(unavailable), backend=backend.name,
                   device=backend.describe())
