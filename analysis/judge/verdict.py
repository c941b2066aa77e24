"""A candidate's verdict: every row judged from the evidence, the diagnosis (pure; no I/O, no printing).

:func:`judge` is a pure function of :class:`repro.runners.evidence.Evidence` (gathering it, and judging what
was gathered, is :func:`analysis.cli.evaluate.evaluate`'s).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

from analysis.judge.diagnosis import behaves_as, diagnose
from analysis.judge.findings import Difference, Finding
from analysis.judge.property_records import RECORDS, judge_rows
from repro.core.contract import Contract
from repro.core.kernel_source import KernelSource
from repro.runners.evidence import Evidence
from repro.runners.inference import Behaviour


@dataclass(frozen=True, kw_only=True)
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

    def finding(self, key: str) -> Finding | None:
        """The row ``key`` (None where the contract entry has no such row)."""
        return next((f for f in self.findings if f.key == key), None)

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


def judge(evidence: Evidence, source: KernelSource, contract_name: str, contract: Contract, seconds: float = 0.0,
          require_coverage: bool = False) -> Verdict:
    """The verdict on ``evidence`` (a pure function of it: no kernel runs here).

    Every row its records give (``analysis.judge.property_records.RECORDS``); where the evidence has the rule
    the kernel behaves as, the differences from the contract and each failing row's causes.
    ``seconds``: what gathering the evidence took.
    """
    controller = contract.controller(contract_name)
    findings = judge_rows(evidence, require_coverage)
    differences, behaves = [], []
    if evidence.behaviour is not None:
        differences, findings = diagnose(evidence.behaviour, controller, contract, findings, source.text)
        behaves = behaves_as(evidence.behaviour, controller, contract)
    # a row the inference did not explain (it crashed): still point at its line where its record knows how
    findings = [replace(f, causes=f.causes or tuple(RECORDS[f.key].source_causes(f, source.text)))
                if RECORDS[f.key].source_causes else f for f in findings]
    return Verdict(source=source, contract=contract_name, backend=evidence.backend, device=evidence.device, findings=findings,
                   evidence=evidence, seconds=seconds,
                   notes=list(evidence.notes), differences=differences, behaves_as=behaves)
