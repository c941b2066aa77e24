"""How values read in words: the number formats the properties' records and ``analysis.present.render`` share.

Pure functions of numbers and of a row's ``detail`` (no evidence, no I/O).
"""

from __future__ import annotations


def significant(x, digits: int = 8) -> str:
    """A float in ``digits`` significant digits (8: every float32 apart), or — for none."""
    return "—" if x is None else f"{float(x):.{digits}g}"


def value(x: float | None, unit: str, otherwise: str) -> str:
    """A row's number and unit, or a word where it has none."""
    return otherwise if x is None else f"{significant(x)} {unit}".rstrip()


def rate_form(form: dict | None, factor: float | None) -> str:
    """A documented rate: ×1.2, ÷1.2, or the proportional rule's ×(1 ± clip·n/horizon)."""
    if not form or form.get("op") == "mul":
        return f"×{significant(factor if not form else form['value'])}"
    if form["op"] == "div":
        return f"÷{significant(form['value'])}"
    sign = "+" if form["sign"] > 0 else "−"
    return f"×(1 {sign} {significant(form['clip'])}·{significant(form['n_steps'])}/{significant(form['horizon'])})"


def vanishing(v: dict) -> str:
    """The vanishing run's summary (``analysis.judge.property_checks.vanishing_summary``) in words."""
    parts = [f"subnormal from step {v['first_subnormal']}" if v["first_subnormal"] else "never subnormal",
             f"0 from step {v['first_zero']}" if v["first_zero"] else f"settles at {significant(v['settled'])}",
             f"back to λ0 {v['recovered']} steps into high KL" if v["recovered"] else
             f"never back under high KL (ends at {significant(v['final'])})"]
    return "; ".join(parts)


def slot_ranges(slots: list[int]) -> str:
    """Slot indices as runs: [492, 493, 494, 496] → "492–494, 496"."""
    out, start = [], None
    for i, s in enumerate(sorted(slots)):
        if start is None:
            start = s
        if i + 1 == len(slots) or sorted(slots)[i + 1] != s + 1:
            out.append(f"{start}" if start == s else f"{start}–{s}")
            start = None
    return ", ".join(out)
