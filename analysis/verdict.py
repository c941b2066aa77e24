"""A candidate's verdict: compile, collect the evidence, judge every property (no I/O, no printing)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

from analysis.diagnosis import applies, behaves_as, diagnose
from analysis.findings import Difference
from analysis.properties import Finding, judge
from repro.backends import Backend
from repro.campaign import Evidence, collect
from repro.contract import Contract
from repro.inference import Behaviour, infer
from repro.kernel_source import KernelSource


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
    behaviour: Behaviour | None = None  # what the candidate behaves as (measured)
    differences: list[Difference] = field(default_factory=list)  # how that differs from the contract
    behaves_as: list[tuple[str, str, str | None]] = field(default_factory=list)  # (quantity, measured, documented)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def failed(self) -> list[Finding]:
        return [f for f in self.findings if not f.ok]

    def as_dict(self) -> dict:
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
        }


def evaluate(source: KernelSource, contract_name: str, backend: Backend, contract: Contract) -> Verdict:
    """Compile ``source`` on ``backend``, run every experiment, judge against ``contract_name``."""
    start = time.perf_counter()
    controller = contract.controller(contract_name)
    kernel = backend.compile(source, contract.slots)
    evidence = collect(kernel, controller)
    verdict = verdict_of(source, contract_name, backend, evidence, 0.0)
    if applies(controller):  # the rule a band candidate behaves as, and why each failing row fails
        verdict.behaviour = infer(kernel, controller)
        verdict.differences = diagnose(verdict.behaviour, controller, contract, verdict.findings, source.text)
        verdict.behaves_as = behaves_as(verdict.behaviour, controller, contract)
    verdict.seconds = time.perf_counter() - start
    return verdict


def verdict_of(source: KernelSource, contract_name: str, backend: Backend, evidence: Evidence,
               seconds: float) -> Verdict:
    """Judge evidence already collected (``seconds``: what collecting it took); no inference, no diagnosis."""
    return Verdict(source, contract_name, backend.name, backend.describe(), judge(evidence), evidence, seconds)
