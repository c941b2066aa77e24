"""How each gate row's columns read (documented, predicted, measured) in the table, the JSON messages, JUnit and
the annotations: one :class:`Reads` per row of :data:`analysis.judge.property_records.RECORDS`, under its key.

Every text is built from the row's :class:`~analysis.judge.findings.Finding` fields alone; the whole row's text
is :mod:`analysis.present.render`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from analysis.judge import reading
from analysis.judge.findings import Finding
from analysis.judge.reading import rate_form, significant


def _starts_measured(f: Finding) -> str:
    """``, 80/80 from λ0 0.05, 0.050000004, 0.525, 1 as the spec model`` ("" where none ran)."""
    d = f.detail
    if not d.get("start_cases"):
        return ""
    n = d["start_cases"]
    starts = ", ".join(significant(x) for x in d["starts"].values())
    return f", {n - len(d['start_broken'])}/{n} from λ0 {starts} as the spec model"


def _steps_documented(f: Finding) -> str:
    if f.documented is None:
        return f"— (closed form {f.predicted:g} ± 1)"
    tol = f.detail.get("tolerance")
    return f"{f.documented:g}" + (f" ± {tol:g}" if tol else "")


def _bound_measured(f: Finding) -> str:
    d = f.detail
    held = ", ".join(f"step {s} ({n})" if s is not None else f"never ({n})" for n, s in d["held_from"].items())
    return f"{d['extreme']} λ {significant(f.measured)}" + (f"; held from {held}" if held else " over the catalogue")


def _state_measured(f: Finding) -> str:
    d = f.detail
    bad = [f"{name} changed" for name, _ in d["changed"]] + [f"PTX {s}" for s in d["stores"]]
    if bad:
        return "; ".join(bad)
    return f"none (read: {' and '.join(d['sources'])}; {len(d['objects'])} data object(s) in the host build)" \
        if "host build's data" in d["sources"] else f"none (read: {' and '.join(d['sources'])})"


def _rate_measured(f: Finding) -> str:
    if f.measured is None:
        return "no unclamped step"
    return f"×{f.measured:.8f} (median of {f.detail['free_steps']} unclamped steps)"


def _dead_zone_documented(f: Finding) -> str:
    d = f.detail
    if d.get("edges_documented"):
        return f"[{d['lower']}, {d['upper']}], edges inclusive"
    return f"×/÷{d['tolerance']:g}, edges inclusive"


def _floor_steps_measured(f: Finding) -> str:
    d = f.detail
    if f.measured is None:
        return f"never clamped at {significant(d['floor'])}"
    before = f"; λ after {int(f.measured) - 1} steps = {significant(d['lambda_before'])}" if d["lambda_before"] else ""
    return f"clamped at {significant(d['floor'])} from step {f.measured:g}{before}"


def _resources_measured(f: Finding) -> str:
    d = f.detail
    regs = f"{d['registers']} registers" if d["registers"] is not None else "registers not reported"
    spill = f"{d['spill_bytes']} B spills" if d["spill_bytes"] is not None else "spills not reported"
    return (f"{d['global_stores']} st.global, {d['local_accesses']} local-memory accesses, {spill}, "
            f"{d['stack_bytes']} B stack, {regs}")


def _sanitizer_measured(f: Finding) -> str:
    d = f.detail
    if f.ok:
        return f"0 errors on the {', '.join(d['paths'])} launch paths"
    return f"{d['kind']} in {d['kernel'] or 'a CUDA call'} at {d['location']} ({d['path']} path)"


def _fraction(what: str) -> Callable[[Finding], str]:
    return lambda f: f"{f.measured:g}/{f.documented:g} {what}"


def _default_predicted(f: Finding) -> str:
    return reading.value(f.predicted, f.unit, COLUMNS[f.key].documented(f))


@dataclass(frozen=True, kw_only=True)
class Reads:
    """How a row reads in the table, JSON messages, JUnit and annotations: each column from the row's fields."""

    documented: Callable[[Finding], str]
    measured: Callable[[Finding], str]
    predicted: Callable[[Finding], str] = _default_predicted  # default: the predicted number and unit


def _same_as_documented(f: Finding) -> str:
    return COLUMNS[f.key].documented(f)


_BOUND = Reads(documented=lambda f: significant(f.documented), predicted=lambda f: significant(f.predicted),
               measured=_bound_measured)
_RATE = Reads(documented=lambda f: rate_form(f.detail.get("form"), f.documented),
              predicted=lambda f: f"×{significant(f.predicted)}",
              measured=_rate_measured)
_COUNT = Reads(documented=_steps_documented, predicted=lambda f: f"{f.predicted:g}",
               measured=lambda f: ", ".join(f"{'never' if c is None else c} from λ0 {significant(f.detail['lambda0'][n])}"
                                            for n, c in f.detail["counts"].items()))
_ONSET = Reads(documented=lambda f: f"KL {f.detail['relation']} {f.detail['edge']}",
               predicted=lambda f: f"next float {'above' if f.key == 'ramp_onset' else 'below'} fl32({f.detail['edge']})",
               measured=lambda f: ", ".join("none" if x is None or math.isnan(x) else significant(x)
                                            for x in f.detail["ratios"]) + " × target")
_IDENTICAL = Reads(documented=lambda f: "identical", predicted=_same_as_documented,
                   measured=lambda f: "identical" if f.ok else "differs")
_SANITIZER = Reads(documented=lambda f: reading.value(f.documented, f.unit, "required"), measured=_sanitizer_measured)

#: Each row's columns, by the row's key (every key of analysis.judge.property_records.RECORDS, and no other).
COLUMNS: dict[str, Reads] = {
    "floor": _BOUND,
    "ceiling": _BOUND,
    "ramp": _RATE,
    "decay": _RATE,
    "steps_to_double": _COUNT,
    "steps_to_halve": _COUNT,
    "steps_to_floor": Reads(documented=_steps_documented, predicted=lambda f: f"{f.predicted:g}",
                            measured=_floor_steps_measured),
    "warm_up_loss": Reads(documented=lambda f: f"at most {f.documented:.0%} (EMA rate ≥ {f.detail['rate']:g})",
                          predicted=lambda f: f"{f.predicted:.1%}",
                          measured=lambda f: ", ".join(f"{x:.1%} ({n})" for n, x in f.detail["losses"].items())),
    "vanishing": Reads(documented=lambda f: "no floor", predicted=lambda f: reading.vanishing(f.detail["spec"]),
                       measured=lambda f: reading.vanishing(f.detail["measured"])),
    "dead_zone": Reads(documented=_dead_zone_documented,
                       predicted=lambda f: f"{f.predicted:g} probes × {f.detail['steps']} steps unchanged",
                       measured=lambda f: f"{f.measured:g}/{f.documented:g} probes held λ for {f.detail['steps']} steps"),
    "ramp_onset": _ONSET,
    "decay_onset": _ONSET,
    "guards": Reads(documented=lambda f: "unchanged" if f.detail.get("guarded", True) else "the source's rule (no guard)",
                    measured=lambda f: f"{f.measured:g}/{f.documented:g} cases "
                    + ("unchanged" if f.detail.get("guarded", True) else "as the spec model of the source")
                    + _starts_measured(f)),
    "nonfinite": Reads(documented=lambda f: f"{f.documented:g} cases pinned", predicted=lambda f: f"{f.predicted:g} cases",
                       measured=lambda f: f"{f.measured:g}/{f.documented:g} cases as pinned" + _starts_measured(f)),
    "isolation": Reads(documented=lambda f: f"slot {f.detail['lambda_slot']} only" if not f.detail.get("state") else
                       f"slot {f.detail['lambda_slot']}, state {reading.slot_ranges(f.detail['state'])}",
                       predicted=_same_as_documented,
                       measured=_fraction("runs left every other slot's bits intact")),
    "outside_state": Reads(documented=lambda f: "none", predicted=_same_as_documented,
                           measured=_state_measured),
    "spec_agreement": _IDENTICAL,
    "launch_modes": _IDENTICAL,
    "single_thread": Reads(documented=lambda f: "thread (0, 0) only",
                           measured=_fraction("other threads left the ISV unchanged")),
    "execution": Reads(documented=lambda f: "no crash, no hang",
                       measured=lambda f: (f"{f.measured:g} crash(es)/time-out(s) ({f.detail['limit']})" if f.measured
                                           else f"all ran ({f.detail['limit']})")),
    "device_view": Reads(documented=lambda f: "same tokens as the host build",
                         measured=lambda f: f"{f.measured:g}/{f.documented:g} device views ({', '.join(f.detail['views'])}) "
                         "preprocess as the host build"),
    "no_atomics": Reads(documented=lambda f: "none",
                        measured=lambda f: ", ".join(f.detail["atomics"]) if f.detail["atomics"]
                        else f"none (NVRTC {f.detail['nvrtc']}, {f.detail['arch']})"),
    "resources": Reads(documented=lambda f: "reported", measured=_resources_measured),
    "coverage": Reads(documented=lambda f: "all" if f.detail.get("required") else "reported",
                      measured=lambda f: f.detail["summary"]),
    "memcheck": _SANITIZER,
    "initcheck": _SANITIZER,
}
