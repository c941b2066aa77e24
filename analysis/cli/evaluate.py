"""A kernel's verdict from scratch, as the gate and the report take it: gather its evidence, then judge it.

Not a command: the one place a command line's kernel runs (:func:`repro.runners.gather.gather`) meet the pure
judgement (:func:`analysis.judge.verdict.judge`), so that no module below the command lines runs a kernel.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from analysis.judge.diagnosis import applies
from analysis.judge.verdict import Verdict, judge
from repro.backends import Backend
from repro.core.contract import Contract
from repro.core.kernel_source import KernelSource
from repro.runners.gather import gather


def static_for_behaviour(backend: Backend) -> bool:
    """Whether a verdict on behaviour alone (the report's: no coverage, no static rows of its own) runs the static
    checks all the same: on a device backend, where the build's data cannot be read, NVRTC's PTX is the only
    evidence of the ``outside_state`` row (without it the row is not measured, a failure)."""
    from repro.backends import entry

    return entry(backend.name).device


def evaluate(source: KernelSource, contract_name: str, backend: Backend, contract: Contract,
             timeout: float | None = None, static: bool = True, coverage: bool = True,
             require_coverage: bool = False, sanitize: bool = False, isolate: bool = True,
             progress: Callable[[str], None] | None = None) -> Verdict:
    """Gather the evidence on ``source`` (:func:`repro.runners.gather.gather`: compile, isolated runs, coverage,
    static rules, sanitizer), then :func:`judge` it against ``contract_name``.

    ``timeout``: a fixed limit (s) per experiment group (None: derived from the reference kernel); the other
    options are :func:`~repro.runners.gather.gather`'s. The inference runs where the diagnosis applies.
    """
    controller = contract.controller(contract_name)
    start = time.perf_counter()
    evidence = gather(backend, source, contract.slots, controller, timeout=timeout, isolate=isolate, static=static,
                      coverage=coverage or require_coverage, inference=applies(controller), sanitize=sanitize,
                      progress=progress)
    return judge(evidence, source, contract_name, contract, time.perf_counter() - start, require_coverage)
