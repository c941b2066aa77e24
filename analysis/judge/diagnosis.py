"""Why a candidate fails: its measured behaviour (``repro.runners.inference``) set against its contract.

Pure functions. :func:`differences` lists each way the behaviour differs from the
documented rule (a constant, an edge's inclusiveness, a slot, NaN/inf semantics,
a guard); :func:`explain` attaches to each failing row only the differences that
row depends on, so a raised floor is blamed on the floor line alone; :func:`locate`
finds the candidate's source line holding the differing constant or comparison.
"""

from __future__ import annotations

import re
from dataclasses import replace

from analysis.judge.findings import Difference, Finding
from analysis.judge.property_records import RECORDS, Property
from analysis.judge.reading import significant
from analysis.judge.source_lines import code_lines
from repro.core.contract import Contract, Controller
from repro.core.f32 import F32, same
from repro.runners.inference import Behaviour


def applies(ctrl: Controller) -> bool:
    """Whether the inference's vocabulary (floor, ceiling, λ·ramp, λ·decay, edges target·tol and target/tol)
    describes the entry's documented rule: the in-repo band controllers, not every peer."""
    keys = ("floor", "ceiling", "ramp", "decay", "tolerance")
    if not ctrl.is_band or ctrl.has("upper_edge") or ctrl.has("lower_edge") or not all(ctrl.has(k) for k in keys):
        return False
    return not any(ctrl[k].none for k in keys) and all((ctrl[k].op or "mul") == "mul" for k in ("ramp", "decay")) \
        and ctrl.bounds == "clamp" and ctrl.guarded


def differences(b: Behaviour, ctrl: Controller, contract: Contract, findings: list[Finding]) -> list[Difference]:
    """Every measured difference from ``ctrl``'s documented rule, slots first."""
    s = contract.slots
    out = []
    for role, key, slot, doc_slot in (("kl", "kl_ema", b.kl_slot, s.kl), ("target", "kl_target", b.target_slot, s.target)):
        if slot != doc_slot:
            # A moved input is a contract edit (the slot line); an input no slot acts as is not.
            line = 0 if slot is None else contract.slot_lines.get(key, 0)
            out.append(Difference(kind="slot", name=role, documented=doc_slot, measured=slot, unit="slot", contract_key=key,
                                  line=line, note="no slot acts as it" if slot is None else ""))
    extra = sorted(set(b.reads) - {s.lambda_, b.kl_slot, b.target_slot})
    if extra and not b.history:  # with state elsewhere every slot looks read: the outside_state row says why
        out.append(Difference(kind="slot", name="reads", documented=None, measured=",".join(map(str, extra)), unit="slot",
                              note="λ depends on these slots too"))
    if b.writes:
        out.append(Difference(kind="slot", name="writes", documented=s.lambda_, measured=",".join(map(str, b.writes)),
                              unit="slot", contract_key="lambda", note="the contract lets a controller write λ's slot only"))
    inputs_found = b.kl_slot is not None and b.target_slot is not None  # else the slot difference says it all
    for name in ("floor", "ceiling", "ramp", "decay"):
        measured, doc, bound = getattr(b, name), ctrl[name], name in ("floor", "ceiling")
        agrees = measured is not None and (same(measured, doc.value) if bound else doc.accepts(measured))
        if measured is None:
            if not inputs_found:
                continue
            note = "never settles" if bound else "not measurable"
        elif agrees:
            continue
        else:
            note = "" if getattr(b, f"{name}_exact", True) else "approximate: no float32 factor reproduces every step"
        out.append(Difference(kind="constant", name=name, documented=doc.value, measured=measured,
                              unit="λ" if bound else "×/step", contract_key=name, line=doc.line, note=note))
    tol = ctrl["tolerance"]
    for name, edge in (("upper", b.upper), ("lower", b.lower)):
        if edge is None:
            if inputs_found:
                out.append(Difference(kind="edge", name=name, documented=tol.value, measured=None, unit="×target",
                                      contract_key="tolerance", line=tol.line,
                                      note="no factor of the target reproduces the onsets"))
        elif not same(edge.factor, tol.value):
            out.append(Difference(kind="constant", name=name, documented=tol.value, measured=edge.factor, unit="×target",
                                  contract_key="tolerance", line=tol.line,
                                  note="inclusive" if edge.inclusive else ""))
        elif edge.inclusive:
            # The edge value belongs to the band in the contract (strict comparisons): not a contract edit.
            out.append(Difference(kind="edge", name=name, documented="strict", measured="inclusive",
                                  note="the documented rule compares strictly (> / <)"))
    if any(d.kind == "slot" and d.name in ("kl", "target") for d in out):
        return out  # the non-finite and guard rows ran in the contract's layout: the slot change explains them
    for f in findings:  # what a failing row shows by itself (its record says how: the guards, the NaN/inf cases)
        if not f.ok and RECORDS[f.key].differences is not None:
            out += RECORDS[f.key].differences(f, b)
    return out


def explain(findings: list[Finding], diffs: list[Difference]) -> list[Finding]:
    """Each failing row with the differences it depends on (its record's ``blames``, else its ``depends``;
    slot differences explain every row); passing rows as they are."""
    slots = [d for d in diffs if d.kind == "slot" and d.name not in ("writes", "reads")]

    def causes(record: Property) -> tuple[Difference, ...]:
        mine = [d for d in diffs if _quantity(d) in record.blames] or [d for d in diffs if _quantity(d) in record.depends]
        return tuple(slots + [d for d in mine if d not in slots])

    return [f if f.ok else replace(f, causes=causes(RECORDS[f.key])) for f in findings]


def _quantity(d: Difference) -> str:
    return d.kind if d.kind in ("nonfinite", "guard") else d.name


def behaves_as(b: Behaviour, ctrl: Controller, contract: Contract) -> list[tuple[str, str, str | None]]:
    """(quantity, measured, documented where it differs) in reading order, for the 'behaves as' line."""
    s = contract.slots

    def item(name, measured, documented, same):
        return name, measured, None if same else documented

    out = []
    for role, slot, doc in (("KL", b.kl_slot, s.kl), ("target", b.target_slot, s.target)):
        out.append(item(f"{role} from slot", "none" if slot is None else str(slot), str(doc), slot == doc))
    extra = sorted(set(b.reads) - {s.lambda_, b.kl_slot, b.target_slot})
    if b.history:
        out.append(item("λ", "depends on earlier calls (state outside the ISV)", "a function of the ISV", False))
    elif extra:
        out.append(item("also reads slots", ",".join(map(str, extra)), "none", False))
    if b.writes:
        out.append(item("writes slots", ",".join(map(str, b.writes)), "none besides λ", False))
    for name, prefix in (("floor", ""), ("ceiling", ""), ("ramp", "×"), ("decay", "×")):
        measured, doc = getattr(b, name), ctrl.value(name)
        if measured is None:
            out.append(item(name, "none", significant(F32(doc), 7), False))
            continue
        agrees = same(measured, doc) if not prefix else ctrl[name].accepts(measured)
        out.append(item(name, prefix + significant(F32(measured), 7), prefix + significant(F32(doc), 7), agrees))
    tol = ctrl.value("tolerance")
    for name, edge, op, sym in (("ramp above", b.upper, "·", ">"), ("decay below", b.lower, "/", "<")):
        if edge is None:
            out.append(item(name, "unmeasured", f"target{op}{significant(F32(tol), 7)}", False))
            continue
        shown = f"target{op}{significant(F32(edge.factor), 7)}" + (" (edge inclusive)" if edge.inclusive else "")
        out.append(item(name, shown, f"target{op}{significant(F32(tol), 7)} (strict {sym})",
                        same(edge.factor, tol) and not edge.inclusive))
    return out


_FLOAT = re.compile(r"(?<![\w.])(\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?[fF]?(?![\w.])")


def locate(text: str, d: Difference) -> int:
    """1-based line of the candidate source holding the constant or comparison ``d`` is about (0: not found)."""
    lines = code_lines(text)
    if d.kind == "slot" and d.name != "writes" and isinstance(d.measured, int | float):
        wanted = str(int(d.measured))
        return next((i for i, line in enumerate(lines, 1) if re.search(rf"(?<![\w.]){wanted}(?![\w.])", line)), 0)
    if d.kind == "constant" and isinstance(d.measured, float):
        for i, line in enumerate(lines, 1):
            for m in _FLOAT.finditer(line):  # every match less its suffix is a Python float literal (12, 1., .5, 1.5e-3)
                if same(float(m.group(0).rstrip("fF")), d.measured):
                    return i
        return 0
    if d.kind == "edge" and d.measured == "inclusive":
        op = ">=" if d.name == "upper" else "<="
        return next((i for i, line in enumerate(lines, 1)
                     if op in line and not re.search(rf"{op}\s*0(\.0*)?f?\b", line)), 0)
    return 0


def diagnose(b: Behaviour, ctrl: Controller, contract: Contract, findings: list[Finding],
             text: str) -> tuple[list[Difference], list[Finding]]:
    """The differences, each with the candidate's source line, and the rows with their causes."""
    diffs = [replace(d, source_line=locate(text, d)) for d in differences(b, ctrl, contract, findings)]
    return diffs, explain(findings, diffs)
