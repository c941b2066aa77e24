"""A candidate's verdict: compile, collect the evidence, judge every property (no I/O, no printing)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace

from analysis.judge.diagnosis import applies, behaves_as, diagnose, stray_write_causes
from analysis.judge.findings import Difference
from analysis.judge.properties import Finding, judge
from repro.backends import Backend, get_backend, ptx, unavailable_reason
from repro.core.contract import Contract
from repro.core.errors import BackendUnavailable
from repro.core.kernel_source import KernelSource
from repro.runners import coverage as cov
from repro.runners.campaign import Evidence, collect
from repro.runners.inference import Behaviour, infer
from repro.runners.isolation import DEFAULT_TIMEOUT, collect_isolated


@dataclass
class Verdict:
    """The gate's result for one kernel under one contract."""

    source: KernelSource
    contract: str
    backend: str
    device: str
    findings: list[Finding]
    evidence: Evidence
    seconds: float
    notes: list[str] = field(default_factory=list)  # what was not checked and why; CPU/GPU caveats
    differences: list[Difference] = field(default_factory=list)  # how that differs from the contract
    behaves_as: list[tuple[str, str, str | None]] = field(default_factory=list)  # (quantity, measured, documented)

    @property
    def behaviour(self) -> Behaviour | None:
        """What the candidate behaves as (measured; None where inference did not run)."""
        return self.evidence.behaviour

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def as_dict(self) -> dict:
        ev = self.evidence
        return {
            "kernel": self.source.origin,
            "sha256": self.source.sha256,
            "contract": self.contract,
            "backend": self.backend,
            "device": self.device,
            "ok": self.ok,
            "seconds": round(self.seconds, 3),
            "behaves_as": [{"quantity": q, "measured": m, "documented": d} for q, m, d in self.behaves_as],
            "differences": [asdict(d) for d in self.differences],
            "properties": [f.as_dict() for f in self.findings],
            "faults": [f.__dict__ for f in ev.faults],
            "static": ev.static.as_dict() if ev.static is not None else None,
            "coverage": ev.coverage.as_dict() if ev.coverage is not None else None,
            "notes": self.notes,
        }


def evaluate(source: KernelSource, contract_name: str, backend: Backend, contract: Contract,
             timeout: float | None = DEFAULT_TIMEOUT, static: bool = True, coverage: bool = True,
             require_coverage: bool = False) -> Verdict:
    """Compile ``source`` on ``backend``, run every experiment, judge against ``contract_name``.

    ``timeout``: s per experiment group, each run in a child process (None: in this process,
    unprotected). ``static``: NVRTC's PTX rules where NVRTC is installed. ``coverage``: gcov line
    and branch counts where g++ and gcov are (``require_coverage`` makes a gap a failure).
    """
    controller = contract.controller(contract_name)
    start = time.perf_counter()
    notes = []
    backend.check_compiles(source, contract.slots)  # the backend's compiler speaks first on a broken source
    static_report = None
    if static:  # a source NVRTC rejects is not CUDA (exit 2), whichever backend runs it
        reason = ptx.unavailable_reason()
        if reason:
            notes.append(f"static checks not run: {reason}")
        else:
            static_report = ptx.analyse(source)
    inference = applies(controller)  # the rule a band candidate behaves as, and why each failing row fails
    if timeout is None:
        kernel = backend.compile(source, contract.slots)
        evidence = collect(kernel, controller)
        if inference:
            evidence = replace(evidence, behaviour=infer(kernel, controller))
    else:  # the candidate's code runs in child processes only
        evidence = collect_isolated(backend, source, contract.slots, controller, timeout, inference=inference)
    coverage_report = None
    if coverage or require_coverage:
        reason = cov.unavailable_reason() or unavailable_reason("host")
        if reason:
            notes.append(f"coverage not measured: {reason}")
        else:
            try:
                coverage_report = cov.measure(get_backend("host"), source, contract.slots, controller,
                                              timeout or DEFAULT_TIMEOUT,
                                              skip=frozenset(f.group for f in evidence.faults))
            except BackendUnavailable as err:
                notes.append(f"coverage not measured: {err}")
            if coverage_report is not None and coverage_report.faults:
                notes.append(f"coverage incomplete: {'; '.join(coverage_report.faults)}")
    evidence = replace(evidence, static=static_report, coverage=coverage_report)
    approx = source.approximate_intrinsics()
    if approx:
        listed = ", ".join(f"{name} (line {line})" for name, line in approx)
        notes.append(f"approximate intrinsics {listed}: CPU and GPU results may differ in the last bits")
    verdict = verdict_of(source, contract_name, backend, evidence, 0.0, require_coverage)
    verdict.notes = notes
    if verdict.behaviour is not None:
        verdict.differences = diagnose(verdict.behaviour, controller, contract, verdict.findings, source.text)
        verdict.behaves_as = behaves_as(verdict.behaviour, controller, contract)
    for f in verdict.findings:  # a stray write the inference did not explain: still point at its line
        if f.key == "isolation":
            f.causes = f.causes or stray_write_causes(f, source.text)
    verdict.seconds = time.perf_counter() - start
    return verdict


def verdict_of(source: KernelSource, contract_name: str, backend: Backend, evidence: Evidence,
               seconds: float, require_coverage: bool = False) -> Verdict:
    """Judge evidence already collected (``seconds``: what collecting it took); no inference, no diagnosis."""
    return Verdict(source, contract_name, backend.name, backend.describe(), judge(evidence, require_coverage),
                   evidence, seconds)
