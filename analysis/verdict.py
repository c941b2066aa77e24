"""A candidate's verdict: compile, collect the evidence, judge every property (no I/O, no printing)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from analysis.properties import Finding, judge
from repro.backends import Backend
from repro.campaign import Evidence, collect
from repro.contract import Contract
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
            "properties": [f.as_dict() for f in self.findings],
        }


def evaluate(source: KernelSource, contract_name: str, backend: Backend, contract: Contract) -> Verdict:
    """Compile ``source`` on ``backend``, run every experiment, judge against ``contract_name``."""
    start = time.perf_counter()
    evidence = collect(backend.compile(source, contract.slots), contract.controller(contract_name))
    return verdict_of(source, contract_name, backend, evidence, time.perf_counter() - start)


def verdict_of(source: KernelSource, contract_name: str, backend: Backend, evidence: Evidence,
               seconds: float) -> Verdict:
    """Judge evidence already collected (``seconds``: what collecting it took)."""
    return Verdict(source, contract_name, backend.name, backend.describe(), judge(evidence), evidence, seconds)
