"""The gate's rows, one record each: its check, the evidence it needs, what the diagnosis blames it on, where it
applies; and the judging of every row that applies to a piece of evidence (:func:`judge_rows`).

The checks are :mod:`analysis.judge.property_checks`; how each row's columns read is
:mod:`analysis.present.property_columns` (one entry per record, keyed by the row's key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from analysis.judge.findings import Difference, Finding
from analysis.judge.memory_findings import memory_findings
from analysis.judge.property_checks import (
    band_onset,
    bound_held,
    coverage,
    dead_zone,
    device_view,
    device_view_causes,
    execution,
    guard_differences,
    guards,
    isolation,
    launch_modes,
    no_atomics,
    nonfinite,
    nonfinite_differences,
    outside_state,
    outside_state_causes,
    rate_per_step,
    resources,
    single_thread,
    spec_agreement,
    steps_to_factor,
    steps_to_floor,
    stray_write_causes,
    vanishing,
    warm_up_loss,
)
from repro.core.contract import Controller
from repro.runners.evidence import GROUPS, SCENARIO_GROUPS, SOURCES, Evidence, MissingEvidence
from repro.runners.inference import Behaviour


@dataclass(frozen=True, kw_only=True)
class Property:
    """One row of the gate, in one place (OpInfo-style): its check, what it needs, what the diagnosis blames
    it on, where it applies (how its columns read: ``analysis.present.property_columns.COLUMNS[key]``).

    ``check(evidence, require_coverage)`` is a pure function returning the row (or rows: the sanitizer's).
    ``needs``: experiment groups (``repro.runners.evidence.GROUPS``) and other evidence (``SOURCES``) it
    reads; where one did not run, the row is "not measured" and fails (no row passes on no evidence).
    ``blames`` / ``depends``: the rule quantities (``analysis.judge.diagnosis``) a failing row is blamed
    on first, else on these (``depends`` alone where they are the same). ``applies(controller)``: whether
    the contract entry has the property.
    ``shown(evidence, require_coverage)``: whether the row is in the table at all (a tool this machine lacks
    is a note, unless the row is required). ``differences(row, behaviour)``: what a failing row shows by itself
    beside the inferred rule's differences (its cases); ``source_causes(row, text)``: its causes in the source
    where no inference explains it (the kernel crashed).
    """

    key: str
    check: Callable[[Evidence, bool], Finding | list[Finding]]
    needs: tuple[str, ...]
    blames: frozenset[str] = frozenset()
    depends: frozenset[str] = frozenset()
    applies: Callable[[Controller], bool] = lambda ctrl: True
    band_only: bool = False
    shown: Callable[[Evidence, bool], bool] = lambda ev, required: True
    differences: Callable[[Finding, Behaviour], list[Difference]] | None = None
    source_causes: Callable[[Finding, str], list[Difference]] | None = None

    def applies_to(self, ctrl: Controller) -> bool:
        if ctrl.stateful and self.key in RATE_ROWS:
            return False
        return (ctrl.is_band or not self.band_only) and self.applies(ctrl)


#: Rows that read a per-step rate, a band or one-step outcomes: a stateful rule (repro.core.stateful) has none of
#: them; its update equations are judged by spec_agreement over the whole catalogue (bad values included), its
#: bounds by the floor and ceiling rows, its writes by isolation (λ and the state slots its entry declares).
RATE_ROWS = frozenset({"ramp", "decay", "steps_to_double", "steps_to_halve", "steps_to_floor", "vanishing",
                       "dead_zone", "ramp_onset", "decay_onset", "nonfinite"})


def _bind_row(check: Callable[..., Finding], **row) -> Callable[[Evidence, bool], Finding]:
    """A record's check from ``check(evidence, **row)``: the rows that do not read ``--require-coverage``."""
    return lambda ev, required: check(ev, **row)


#: Every row of the gate, in its order: the documented properties, then the static, coverage and sanitizer rows.
RECORDS: dict[str, Property] = {p.key: p for p in (
    Property(key="floor", check=_bind_row(bound_held, key="floor", scenarios=("aligned", "decay_from_ceiling")),
             needs=("catalogue",), depends=frozenset({"floor"}), applies=lambda c: c.bound("floor") is not None),
    Property(key="ceiling", check=_bind_row(bound_held, key="ceiling", scenarios=("diverged", "ramp_from_floor")),
             needs=("catalogue",), depends=frozenset({"ceiling"}), applies=lambda c: c.bound("ceiling") is not None),
    Property(key="ramp", check=_bind_row(rate_per_step, key="ramp", scenario="ramp_from_floor"), needs=("catalogue",),
             blames=frozenset({"ramp"}), depends=frozenset({"ramp", "floor", "ceiling"})),
    Property(key="decay", check=_bind_row(rate_per_step, key="decay", scenario="decay_from_ceiling"), needs=("catalogue",),
             blames=frozenset({"decay"}), depends=frozenset({"decay", "floor", "ceiling"})),
    Property(key="steps_to_double", check=_bind_row(steps_to_factor, key="steps_to_double",
                                                    scenarios=("diverged", "ramp_from_floor"), factor=2.0,
                                                    title="steps to double (sustained high KL)"),
             needs=("catalogue",), blames=frozenset({"ramp"}), depends=frozenset({"ramp", "ceiling"})),
    Property(key="steps_to_halve", check=_bind_row(steps_to_factor, key="steps_to_halve",
                                                   scenarios=("decay_from_ceiling", "aligned"), factor=0.5,
                                                   title="steps to halve (sustained low KL)"),
             needs=("catalogue",), blames=frozenset({"decay"}), depends=frozenset({"decay", "floor"})),
    Property(key="steps_to_floor", check=_bind_row(steps_to_floor), needs=("catalogue",),
             depends=frozenset({"decay", "floor"}), applies=lambda c: c.has("steps_to_floor")),
    Property(key="warm_up_loss", check=_bind_row(warm_up_loss), needs=("catalogue",),
             depends=frozenset({"decay", "lower", "floor"}), applies=lambda c: c.has("warm_up_loss")),
    Property(key="vanishing", check=_bind_row(vanishing), needs=("vanishing",),
             applies=lambda c: c.bound("floor") is None),
    Property(key="dead_zone", check=_bind_row(dead_zone), needs=("dead_zone",), band_only=True,
             depends=frozenset({"upper", "lower"})),
    # probed from the seed λ: a ceiling at the seed leaves nothing to ramp
    Property(key="ramp_onset", check=_bind_row(band_onset, which="ramp"), needs=("onsets",), band_only=True,
             blames=frozenset({"upper"}), depends=frozenset({"upper", "ceiling"})),
    Property(key="decay_onset", check=_bind_row(band_onset, which="decay"), needs=("onsets",), band_only=True,
             blames=frozenset({"lower"}), depends=frozenset({"lower", "floor"})),
    Property(key="guards", check=_bind_row(guards), needs=("guards", "starts"), depends=frozenset({"guard"}),
             differences=guard_differences),
    Property(key="nonfinite", check=_bind_row(nonfinite), needs=("nonfinite", "starts"), blames=frozenset({"nonfinite"}),
             differences=nonfinite_differences,
             depends=frozenset({"nonfinite", "floor", "ceiling", "ramp", "decay"})),
    Property(key="isolation", check=_bind_row(isolation), needs=SCENARIO_GROUPS, depends=frozenset({"writes"}),
             source_causes=stray_write_causes),
    Property(key="outside_state", check=_bind_row(outside_state), needs=("state",), blames=frozenset({"state"}),
             source_causes=outside_state_causes),
    Property(key="spec_agreement", check=_bind_row(spec_agreement), needs=("catalogue", "ranges"),
             depends=frozenset({"floor", "ceiling", "ramp", "decay", "upper", "lower", "guard", "nonfinite", "reads"})),
    Property(key="launch_modes", check=_bind_row(launch_modes), needs=("catalogue", "per_step")),
    Property(key="single_thread", check=_bind_row(single_thread), needs=("threads",)),
    Property(key="execution", check=_bind_row(execution), needs=()),
    Property(key="device_view", check=_bind_row(device_view), needs=("device_view",),
             shown=lambda ev, required: ev.device_views is not None, source_causes=device_view_causes),
    Property(key="no_atomics", check=_bind_row(no_atomics), needs=("static",), shown=lambda ev, required: ev.static is not None),
    Property(key="resources", check=_bind_row(resources), needs=("static",), shown=lambda ev, required: ev.static is not None),
    Property(key="coverage", check=coverage, needs=("coverage",),
             shown=lambda ev, required: ev.coverage is not None or required),
    Property(key="memcheck", check=lambda ev, required: memory_findings(ev.sanitizer, "memcheck"), needs=("sanitizer",),
             shown=lambda ev, required: ev.sanitizer is not None),
    Property(key="initcheck", check=lambda ev, required: memory_findings(ev.sanitizer, "initcheck"), needs=("sanitizer",),
             shown=lambda ev, required: ev.sanitizer is not None),
)}


def applicable(ctrl: Controller) -> list[str]:
    """The documented properties judged for a contract entry (the rows that need no tool: not the static,
    coverage and sanitizer rows): floor and ceiling where the rule has them, vanishing where it has no floor,
    steps_to_floor where documented, the band's properties for band rules."""
    return [key for key, p in RECORDS.items() if not set(p.needs) & set(SOURCES) and p.applies_to(ctrl)]


def missing(ev: Evidence, needs: tuple[str, ...]) -> str:
    """Why the evidence in ``needs`` is not all there, in words ("" when it is)."""
    groups = [n for n in needs if n in GROUPS and n not in ev.groups_run]
    out = [f"{', '.join(groups)} did not finish (see the execution row)"] if groups else []
    if "device_view" in needs and ev.device_views is None:
        out.append("the candidate was not preprocessed (no C++ compiler here)")
    if "static" in needs and ev.static is None:
        out.append("the static rules did not run" + (": NVRTC is not available here" if "static" in ev.unavailable else ""))
    cov = ev.coverage
    if "coverage" in needs and cov is None:
        out.append("the coverage build did not run" + (": gcov is not available here" if "coverage" in ev.unavailable
                                                       else ""))
    elif "coverage" in needs and not cov.ran_in_full:
        out.append(f"the coverage build did not run every group ({'; '.join(cov.fault_lines())})")
    hung = [f.scenario for f in ev.faults if f.group == "sanitizer"]
    if "sanitizer" in needs and (ev.sanitizer is None or hung):
        out.append("compute-sanitizer " + (f"hung on {', '.join(hung)}" if hung else "did not run"))
    return "; ".join(out)


def judge_rows(ev: Evidence, require_coverage: bool = False) -> list[Finding]:
    """Every row that applies to the evidence's controller, in the gate's order; "not measured" (a failure)
    where what a row needs did not run, or a scenario it reads did not finish."""
    rows = []
    for key, prop in RECORDS.items():
        if not prop.applies_to(ev.controller) or not prop.shown(ev, require_coverage):
            continue
        why = missing(ev, prop.needs)
        if not why:
            try:
                got = prop.check(ev, require_coverage)
                rows += got if isinstance(got, list) else [got]
                continue
            except MissingEvidence as err:
                why = f"scenario {err.args[0]!r} did not finish (see the execution row)"
        rows.append(Finding(key=key, title=key, ok=False, unit="", documented=None, predicted=None, measured=None,
                            detail={"not_measured": why}))
    return rows
