"""The gate's rows as text for each reader: the table, one-line messages, JSON, JUnit XML, GitHub annotations.

The only place findings become whole texts. How each row's columns read is
:data:`analysis.present.property_columns.COLUMNS` (one entry per row of
``analysis.judge.property_records.RECORDS``); this module assembles the columns. Every function takes the structured rows
(:class:`analysis.judge.findings.Finding`, :class:`~analysis.judge.findings.Difference`) and
the names of the files to point at; none reads text back.
"""

from __future__ import annotations

import json
import math
from xml.etree import ElementTree as ET

from analysis.judge.findings import Difference, Finding, Where
from analysis.judge.reading import significant
from analysis.judge.trace_moves import Moves
from analysis.judge.verdict import Verdict
from analysis.present.property_columns import COLUMNS
from repro.core.paths import shown


def documented(f: Finding) -> str:
    """The row's documented value in words (its columns say how; "—" where it was not measured)."""
    return "—" if "not_measured" in f.detail else COLUMNS[f.key].documented(f)


def predicted(f: Finding) -> str:
    return "—" if "not_measured" in f.detail else COLUMNS[f.key].predicted(f)


def measured(f: Finding) -> str:
    if "not_measured" in f.detail:
        return f"not measured: {f.detail['not_measured']}"
    return COLUMNS[f.key].measured(f)


def where(w: Where | None) -> str:
    """Where a failure first shows, in words."""
    if w is None:
        return ""
    at = f"{w.scenario}, step {w.step}" if w.step is not None else w.scenario
    if w.event == "crossed":
        return f"{at}: λ = {significant(w.lam)} (bound {significant(w.expected)})"
    if w.event == "never_settles":
        return f"{w.scenario}: λ never settles at {significant(w.expected)} (ends at {significant(w.lam)})"
    if w.event == "ratio":
        return f"{at}: step ratio {significant(w.expected)}"
    if w.event == "no_free_step":
        return f"{w.scenario}: λ never moves freely"
    if w.event == "count":
        return f"{w.scenario}: {'never' if w.step is None else w.step}"
    if w.event == "onset":
        return f"{w.scenario}: λ first moves at KL {significant(w.kl)}, documented {significant(w.expected)}"
    if w.event == "moved":
        return f"{at}: λ {significant(w.expected)} → {significant(w.lam)}"
    if w.event == "differs":
        return f"{at}: kernel {significant(w.lam)}, {w.reference} {significant(w.expected)}"
    if w.event == "stray":  # ``expected`` carries the ISV's length: an index outside it is a write outside the ISV
        n = int(w.expected) if w.expected else None
        shown = [str(i) if n is None or 0 <= i < n else f"{i} (outside the {n}-float ISV)" for i in w.slots]
        return f"{w.scenario}: slot(s) {', '.join(shown)} written"
    if w.event == "sanitizer":
        return w.scenario
    if w.event == "cases":
        return "; ".join(f"{case}: {seen} (contract: {pinned})" for case, seen, pinned in w.cases[:3])
    return at


def difference(d: Difference) -> str:
    """One difference in words: "floor 0.1 (contract 0.05)", "reads the target from slot 490 (contract 491)"."""
    if d.kind == "slot" and d.name == "writes":
        return f"writes slot(s) {d.measured} besides λ's slot {d.documented}"
    if d.kind == "slot" and d.name == "reads":
        return f"also reads slot(s) {d.measured} (the contract's inputs are λ, KL and target only)"
    if d.kind == "slot":
        role = "KL" if d.name == "kl" else "target"
        if d.measured is None:
            return f"no slot acts as the {role} (contract: slot {d.documented})"
        return f"slot change: reads the {role} from slot {d.measured} (contract: slot {d.documented})"
    if d.kind == "nonfinite":
        return f"{d.name}: {d.note}"
    if d.kind == "guard":  # the pinned cases as one; a case from another starting λ by its name
        return f"guard: {d.note} ({d.measured})" if d.name == "guard" else f"{d.name}: {d.note}"
    if d.kind in ("device_view", "state"):
        return d.note
    if d.kind == "edge" and d.measured == "inclusive":
        side = "ramp" if d.name == "upper" else "decay"
        return f"the {side} edge is inclusive (the edge value itself moves λ; {d.note})"
    shown = {"upper": "ramp above target·", "lower": "decay below target/"}.get(d.name)
    if d.measured is None:
        return f"{d.name}: {d.note} (contract {significant(d.documented)})"
    if shown:
        edge = ", edge inclusive" if d.note == "inclusive" else ""
        return f"{shown}{significant(d.measured)} (contract {significant(d.documented)}{edge})"
    prefix = "×" if d.unit == "×/step" else ""
    extra = f"; {d.note}" if d.note else ""
    return f"{d.name} {prefix}{significant(d.measured)} (contract {prefix}{significant(d.documented)}{extra})"


def hints(f: Finding, contract_file: str) -> list[str]:
    """For a failing row: each cause, and the contract line a deliberate change edits."""
    if f.ok:
        return []
    out = []
    for d in f.causes:
        line = difference(d)
        if d.line:
            line += f" — if intended, change {contract_file}:{d.line} ({d.contract_key})"
        out.append(line)
    # a crash or hang kept the evidence from existing: nothing in the contract to change
    if "not_measured" in f.detail or f.detail.get("unmeasured"):
        out.append("not measured where the candidate crashed or hung: see the execution row")
    elif not f.causes and f.line:
        out.append(f"no measured constant differs; if intended, change {contract_file}:{f.line} ({f.doc})")
    return out


def message(f: Finding, contract_file: str) -> str:
    """The row as one paragraph (pytest assertion, JUnit failure message)."""
    text = f"{f.key}: {'PASS' if f.ok else 'FAIL'} — documented {documented(f)}, measured {measured(f)}"
    if f.where and not f.ok:
        text += f"; first shows: {where(f.where)}"
    return text + "".join(f"; {h}" for h in hints(f, contract_file))  # no hints for a passing row


def behaves_as(items: list[tuple[str, str, str | None]]) -> str:
    """ "behaves as: floor 0.1 (contract 0.05), ramp ×1.2, …" """
    return "behaves as: " + ", ".join(f"{q} {m}" + (f" (contract {d})" if d is not None else "") for q, m, d in items)


def table(findings: list[Finding], contract_file: str) -> str:
    """The rows as a plain-text table; each failure followed by where it shows and its hints."""
    head = ("property", "documented", "measured", "verdict")
    rows = [(f.key, documented(f), measured(f), "PASS" if f.ok else "FAIL") for f in findings]
    widths = [min(max(len(r[i]) for r in [head, *rows]), cap) for i, cap in enumerate((16, 24, 80, 7))]

    def line(cells):
        return "  ".join(_clip(c, w).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [line(head), line(["-" * w for w in widths])]
    for f, row in zip(findings, rows, strict=True):
        out.append(line(row))
        if f.where and not f.ok:
            out.append(f"    first shows: {where(f.where)}")
        out += [f"    {h}" for h in hints(f, contract_file)]  # none for a passing row
    return "\n".join(out)


def verdict(v: Verdict, contract_file: str) -> str:
    """The gate's text output: what was judged on what, how it behaves, the table, notes and the verdict line."""
    out = [f"kernel   {shown(v.source.origin)}  (sha256 {v.source.sha256[:12]})",
           f"contract {v.contract}  ({contract_file})",
           f"backend  {v.backend}: {v.device}", ""]
    if v.behaves_as:
        out += [behaves_as(v.behaves_as), ""]
    out += [table(v.findings, contract_file), ""]
    out += [f"note: {note}" for note in v.notes]
    n, bad = len(v.findings), v.failed
    unmeasured = [f for f in bad if "not_measured" in f.detail]  # failing on no evidence: not a measured violation
    violated = [f for f in bad if f not in unmeasured]
    if bad:
        failed_counts = []
        if violated:
            failed_counts.append(f"{len(violated)} of {n} properties violated ({', '.join(f.key for f in violated)})")
        if unmeasured:
            failed_counts.append(f"{len(unmeasured)} not measured" if violated
                                 else f"{len(unmeasured)} of {n} properties not measured")
        out.append(f"FAIL: {', '.join(failed_counts)} in {v.seconds:.2f} s")
    else:
        out.append(f"PASS: all {n} properties hold in {v.seconds:.2f} s")
    return "\n".join(out)


def replay_line(m: Moves) -> str:
    """One controller's replay in a line: λ start → end, its range, and the steps that ramped, decayed, held."""
    return (f"{m.controller:9s} λ {m.start:.4g} → {m.end:.4g} (min {m.low:.4g}, max {m.high:.4g}) over {m.steps} "
            f"steps: {m.up} up, {m.down} down, {m.unchanged} unchanged")


def md_cell(text) -> str:
    """``text`` as one Markdown table cell (a ``|`` in it would end the cell)."""
    return str(text).replace("|", "\\|")


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _finite(obj):
    """JSON has no NaN/inf: they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def strict_json(data, **options) -> str:
    """JSON that every parser reads (NaN and ±inf as null); ``options``: json.dumps's layout options."""
    return json.dumps(_finite(data), allow_nan=False, **options)


def to_json(data: dict) -> str:
    return strict_json(data, indent=2, ensure_ascii=False)


def junit(findings: list[Finding], contract_file: str, suite: str, seconds: float, error: str | None = None) -> str:
    """JUnit XML: one test case per property (``classname`` gate.<contract>, ``name`` the row's key);
    an exit-2 outcome is one test case with an ``error``."""
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=suite, tests=str(len(findings) or 1),
                       failures=str(sum(not f.ok for f in findings)), errors="1" if error else "0",
                       skipped="0", time=f"{seconds:.3f}")
    if error:
        case = ET.SubElement(ts, "testcase", classname=suite, name="gate", time="0")
        ET.SubElement(case, "error", message=error, type="SuiteError").text = error
    for f in findings:
        case = ET.SubElement(ts, "testcase", classname=suite, name=f.key, time="0")
        text = message(f, contract_file)
        if not f.ok:
            lines = [text, *([f"first shows: {where(f.where)}"] if f.where else []), *hints(f, contract_file)]
            ET.SubElement(case, "failure", message=text, type="PropertyViolated").text = "\n".join(lines)
        else:
            ET.SubElement(case, "system-out").text = text
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _esc(text: str, prop: bool = False) -> str:
    text = text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return text.replace(":", "%3A").replace(",", "%2C") if prop else text


def github(findings: list[Finding], kernel_file: str, contract_file: str, error: str | None = None) -> list[str]:
    """GitHub workflow commands: one ``::error`` per failing row at the candidate's line where it is
    localised (else its first line), and a ``::notice`` at the contract line a deliberate change edits."""
    kernel, contract = _esc(kernel_file, True), _esc(contract_file, True)
    if error:
        return [f"::error file={kernel},title={_esc('gate: error', True)}::{_esc(error)}"]
    out = []
    for f in (f for f in findings if not f.ok):
        line, title = next((d.source_line for d in f.causes if d.source_line), 1), _esc(f"gate: {f.key}", True)
        out.append(f"::error file={kernel},line={line},title={title}::{_esc(message(f, contract_file))}")
        out += [f"::notice file={contract},line={d.line},title={title}::{_esc('if intended: ' + difference(d))}"
                for d in f.causes if d.line]
        if not f.causes and f.line:
            out.append(f"::notice file={contract},line={f.line},title={title}::"
                       f"{_esc('if intended, change the documented value')}")
    return out
