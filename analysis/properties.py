"""Verdicts: each documented property measured from the evidence and judged against the contract.

Pure functions of :class:`repro.campaign.Evidence` (no kernel runs here).
Float32 comparisons are bitwise (``view(np.uint32)``) unless the property
states a tolerance (the per-step rates, "about 34 steps").
"""

from __future__ import annotations

import numpy as np

from analysis.findings import Finding, Where
from repro import spec
from repro.campaign import Evidence
from repro.contract import Controller
from repro.runner import Run
from repro.spec import band_edges

F32 = np.float32


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=F32).view(np.uint32)


def same(a, b) -> bool:
    """Bitwise equality of float32 arrays (NaN payloads included)."""
    return bool(np.array_equal(bits(a), bits(b)))


def _f(x) -> float | None:
    return None if x is None else float(x)


def _valid_runs(ev: Evidence) -> list[Run]:
    """Catalogue runs with ordinary inputs: λ0 within the bounds, not the bad-value family."""
    floor, ceiling = F32(ev.controller.value("floor")), F32(ev.controller.value("ceiling"))
    return [r for r in ev.catalogue if r.scenario.family != "bad_values" and floor <= r.scenario.lambda0 <= ceiling]


def first_step(mask: np.ndarray) -> int | None:
    """1-based step of the first True, or None."""
    hits = np.flatnonzero(mask)
    return int(hits[0]) + 1 if hits.size else None


def reached_and_held(lam: np.ndarray, bound: np.float32) -> tuple[int | None, bool]:
    """(first step at which λ equals ``bound`` bit for bit, whether it stays there to the end)."""
    at = bits(lam) == bits(bound)
    step = first_step(at)
    return step, step is not None and bool(at[step - 1 :].all())


def _at(r: Run, step: int, event: str, expected=None, reference: str = "") -> Where:
    """Where in run ``r`` (1-based ``step``) something shows, with the inputs fed at that step."""
    sc = r.scenario
    return Where(sc.name, event, step, _f(r.lam[step - 1]), _f(expected), reference,
                 _f(sc.kl[step - 1]), _f(sc.target[step - 1]))


def _bound(ev: Evidence, key: str, scenarios: tuple[str, ...], crosses) -> Finding:
    ctrl = ev.controller
    doc = ctrl[key]
    bound = F32(doc.value)
    extreme, where = None, None
    for r in _valid_runs(ev):
        bad = crosses(r.lam, bound)
        if bad.any() and where is None:
            where = _at(r, first_step(bad), "crossed", bound, "contract")
        value = r.lam.min() if key == "floor" else r.lam.max()
        extreme = value if extreme is None else (min(extreme, value) if key == "floor" else max(extreme, value))
    held = {}
    for name in scenarios:
        step, stays = reached_and_held(ev.run(name).lam, bound)
        held[name] = step if stays else None
        if not stays and where is None:
            r = ev.run(name)
            where = Where(name, "never_settles", r.scenario.steps, _f(r.lam[-1]), _f(bound), "contract")
    ok = where is None and extreme == bound
    return Finding(key, f"{key} (never crossed, reached and held)", ok, "λ", doc.value, bound, extreme,
                   {"extreme": "lowest" if key == "floor" else "highest", "held_from": held}, where, doc.line, doc.doc)


def floor(ev: Evidence) -> Finding:
    return _bound(ev, "floor", ("aligned", "decay_from_ceiling"), lambda lam, b: lam < b)


def ceiling(ev: Evidence) -> Finding:
    return _bound(ev, "ceiling", ("diverged", "ramp_from_floor"), lambda lam, b: lam > b)


def _rate(ev: Evidence, key: str, scenario: str) -> Finding:
    doc = ev.controller[key]
    r = ev.run(scenario)
    lam = np.concatenate([[r.scenario.lambda0], r.lam]).astype(np.float64)
    lo, hi = ev.controller.value("floor"), ev.controller.value("ceiling")
    free = (lam[1:] > F32(lo)) & (lam[1:] < F32(hi)) & (lam[:-1] > 0)
    ratios = lam[1:][free] / lam[:-1][free]
    title = f"{key} rate (× per step, rtol {doc.rtol:g})"
    if ratios.size == 0:
        return Finding(key, title, False, "×/step", doc.value, F32(doc.value), None, {"free_steps": 0},
                       Where(scenario, "no_free_step"), doc.line, doc.doc)
    median = float(np.median(ratios))
    worst_at = int(np.argmax(np.abs(ratios - doc.value)))
    worst = ratios[worst_at]
    ok = doc.accepts(median) and doc.accepts(float(worst))
    step = int(np.flatnonzero(free)[worst_at]) + 1
    where = None if ok else _at(r, step, "ratio", worst, "step ratio")
    return Finding(key, title, ok, "×/step", doc.value, F32(doc.value), median,
                   {"free_steps": int(ratios.size), "rtol": doc.rtol}, where, doc.line, doc.doc)


def ramp(ev: Evidence) -> Finding:
    return _rate(ev, "ramp", "ramp_from_floor")


def decay(ev: Evidence) -> Finding:
    return _rate(ev, "decay", "decay_from_ceiling")


def _steps_to(r: Run, factor: float) -> int | None:
    """First step at which λ reaches ``factor``·λ0 (≥ for factor > 1, ≤ for factor < 1)."""
    goal = float(r.scenario.lambda0) * factor
    lam = r.lam.astype(np.float64)
    return first_step(lam >= goal if factor > 1 else lam <= goal)


def _count(ev: Evidence, key: str, scenarios: tuple[str, ...], factor: float, predicted: int, title: str) -> Finding:
    doc = ev.controller[key]
    counts = {name: _steps_to(ev.run(name), factor) for name in scenarios}
    bad = [n for n, c in counts.items() if c is None or not doc.accepts(c)]
    where = None
    if bad:
        r = ev.run(bad[0])
        c = counts[bad[0]]
        where = (Where(bad[0], "count", c, _f(r.lam[c - 1]), _f(r.scenario.lambda0), "λ0") if c is not None
                 else Where(bad[0], "count", None, _f(r.lam[-1]), _f(r.scenario.lambda0), "λ0"))
    lambda0 = {n: float(ev.run(n).scenario.lambda0) for n in scenarios}
    return Finding(key, title, not bad, "steps", doc.value, predicted, next(iter(counts.values())),
                   {"counts": counts, "lambda0": lambda0, "factor": factor, "tolerance": doc.tolerance},
                   where, doc.line, doc.doc)


def steps_to_double(ev: Evidence) -> Finding:
    ctrl = ev.controller
    return _count(ev, "steps_to_double", ("diverged", "ramp_from_floor"), 2.0,
                  spec.steps_to_double(ctrl.value("ramp")), "steps to double (sustained high KL)")


def steps_to_halve(ev: Evidence) -> Finding:
    ctrl = ev.controller
    return _count(ev, "steps_to_halve", ("decay_from_ceiling", "aligned"), 0.5,
                  spec.steps_to_halve(ctrl.value("decay")), "steps to halve (sustained low KL)")


def steps_to_floor(ev: Evidence) -> Finding:
    ctrl = ev.controller
    doc = ctrl["steps_to_floor"]
    r = ev.run("aligned")
    step, _ = reached_and_held(r.lam, F32(ctrl.value("floor")))
    ok = step is not None and doc.accepts(step)
    predicted = spec.steps_to_floor(ctrl.value("seed_lambda"), ctrl.value("floor"), ctrl.value("decay"))
    before = _f(r.lam[step - 2]) if step and step > 1 else None
    where = None if ok else Where("aligned", "count", step, before, _f(ctrl.value("floor")), "floor")
    return Finding("steps_to_floor", "steps from seed λ to the floor (the collapse)", ok, "steps",
                   doc.value, predicted, step, {"floor": ctrl.value("floor"), "lambda_before": before,
                                                "tolerance": doc.tolerance}, where, doc.line, doc.doc)


def dead_zone(ev: Evidence) -> Finding:
    doc = ev.controller["tolerance"]
    moved = [(r, first_step(bits(r.lam) != bits(r.scenario.lambda0))) for r in ev.dead_zone]
    moved = [(r, s) for r, s in moved if s is not None]
    steps = ev.dead_zone[0].scenario.steps
    where = _at(moved[0][0], moved[0][1], "moved", moved[0][0].scenario.lambda0, "λ0") if moved else None
    n = len(ev.dead_zone)
    return Finding("dead_zone", f"dead zone [target/{doc.value:g}, {doc.value:g}·target] holds λ bit for bit",
                   not moved, "probes", n, n, n - len(moved), {"tolerance": doc.value, "steps": steps},
                   where, doc.line, doc.doc)


def _onset(ev: Evidence, which: str) -> Finding:
    doc = ev.controller["tolerance"]
    edge_key = "above" if which == "ramp" else "below"
    expected = np.array([band_edges(t, doc.value)[edge_key] for t in ev.probe_targets], dtype=F32)
    found = ev.onsets[which]
    ratio = found.astype(np.float64) / ev.probe_targets
    ok = same(found, expected)
    bad = np.flatnonzero(bits(found) != bits(expected))
    where = None
    if not ok:
        i = bad[0]
        where = Where(f"onset probe, target {float(ev.probe_targets[i]):.8g}", "onset", None, None,
                      _f(expected[i]), "contract", _f(found[i]), _f(ev.probe_targets[i]))
    rel = ">" if which == "ramp" else "<"
    sym = f"target·{doc.value:g}" if which == "ramp" else f"target/{doc.value:g}"
    documented = doc.value if which == "ramp" else 1.0 / doc.value
    measured = float(np.nanmedian(ratio)) if np.isfinite(ratio).any() else None
    return Finding(f"{which}_onset", f"{which} begins at KL {rel} {sym} (strict, float32)", ok, "×target",
                   documented, documented, measured,
                   {"ratios": [_f(x) for x in ratio], "targets": [_f(t) for t in ev.probe_targets],
                    "onsets": [_f(x) for x in found], "expected": [_f(x) for x in expected]},
                   where, doc.line, doc.doc)


def ramp_onset(ev: Evidence) -> Finding:
    return _onset(ev, "ramp")


def decay_onset(ev: Evidence) -> Finding:
    return _onset(ev, "decay")


def guards(ev: Evidence) -> Finding:
    broken = [r for r in ev.guards if not same(r.lam, np.full(r.lam.shape, r.scenario.lambda0, dtype=F32))]
    where = None
    if broken:
        r = broken[0]
        where = _at(r, first_step(bits(r.lam) != bits(r.scenario.lambda0)), "moved", r.scenario.lambda0, "λ0")
    n = len(ev.guards)
    return Finding("guards", "KL ≤ 0, target ≤ 0 or λ ≤ 0 leave λ unchanged", not broken, "cases", n, n,
                   n - len(broken), {"broken": [r.scenario.name for r in broken]}, where, 0, ev.controller.guards_doc)


def isolation(ev: Evidence) -> Finding:
    slot = ev.lambda_slot
    everything = ev.catalogue + ev.per_step + ev.guards + ev.nonfinite + ev.dead_zone
    stray = [r for r in everything if r.stray]
    where = Where(stray[0].scenario.name, "stray", slots=tuple(stray[0].stray)) if stray else None
    n = len(everything)
    written = sorted({s for r in stray for s in r.stray})
    return Finding("isolation", "only the λ slot is written", not stray, "runs", n, n, n - len(stray),
                   {"lambda_slot": slot, "written": written}, where, 0,
                   "the controller writes λ's ISV slot and nothing else")


def spec_agreement(ev: Evidence) -> Finding:
    rule = spec.Rule.of(ev.controller)
    where, total = None, 0
    for r in ev.catalogue:
        expected = spec.run(rule, [r.scenario.lambda0], r.scenario.kl[:, None], r.scenario.target[:, None])[:, 0]
        total += r.scenario.steps
        if where is None and not same(r.lam, expected):
            step = first_step(bits(r.lam) != bits(expected))
            where = _at(r, step, "differs", expected[step - 1], "spec")
    return Finding("spec_agreement", "bit-identical to the float32 spec model", where is None, "steps compared",
                   None, None, total, {}, where, 0, "the kernel matches the spec model bit for bit on every scenario")


def launch_modes(ev: Evidence) -> Finding:
    where = None
    for a, b in zip(ev.catalogue, ev.per_step, strict=True):
        if not same(a.lam, b.lam):
            step = first_step(bits(a.lam) != bits(b.lam))
            where = _at(a, step, "differs", b.lam[step - 1], "per-step launches")
            break
    return Finding("launch_modes", "per-step launches and the looped harness agree", where is None, "runs",
                   None, None, len(ev.catalogue), {}, where, 0, "both launch paths give the same bits")


def outcomes(lam0: np.float32, rule: spec.Rule) -> dict[str, np.float32]:
    """λ after one step under ``rule`` for each named outcome: unchanged, max, min, ramp, decay."""
    with np.errstate(all="ignore"):
        return {
            "unchanged": lam0,
            "max": rule.ceiling,
            "min": rule.floor,
            "ramp": np.fmin(rule.ceiling, F32(lam0 * rule.ramp)),
            "decay": np.fmax(rule.floor, F32(lam0 * rule.decay)),
        }


def classify(lam0: np.float32, lam1: np.float32, rule: spec.Rule) -> str:
    """Name what one step did to λ: unchanged, max, min, ramp, decay, or other (value)."""
    for name, value in outcomes(lam0, rule).items():
        if same(value, lam1):
            return name
    return f"other ({float(lam1):.8g})"


def nonfinite(ev: Evidence) -> Finding:
    rule = spec.Rule.of(ev.controller)
    table = ev.controller.nonfinite
    seen = {r.scenario.name: classify(r.scenario.lambda0, r.lam[0], rule) for r in ev.nonfinite}
    lambda0 = {r.scenario.name: float(r.scenario.lambda0) for r in ev.nonfinite}
    lambda1 = {r.scenario.name: float(r.lam[0]) for r in ev.nonfinite}
    wrong = tuple((k, str(seen.get(k)), table[k]) for k in table if seen.get(k) != table[k])
    where = Where(wrong[0][0], "cases", cases=wrong) if wrong else None
    n = len(table)
    return Finding("nonfinite", "NaN and ±inf inputs behave as characterised", not wrong, "cases", n, n,
                   n - len(wrong), {"seen": seen, "lambda0": lambda0, "lambda1": lambda1}, where, ev.controller.nonfinite_line,
                   "characterised by measurement and pinned in the contract's [nonfinite] table")


#: Every property the gate judges, in its order.
CHECKS = {f.__name__: f for f in (floor, ceiling, ramp, decay, steps_to_double, steps_to_halve, steps_to_floor, dead_zone,
                                  ramp_onset, decay_onset, guards, nonfinite, isolation, spec_agreement, launch_modes)}


def applicable(ctrl: Controller) -> list[str]:
    """The properties judged for a contract entry (steps_to_floor only where it is documented)."""
    return [key for key in CHECKS if key != "steps_to_floor" or ctrl.has("steps_to_floor")]


def judge(ev: Evidence) -> list[Finding]:
    """Every property that applies to the evidence's controller, in the gate's order."""
    return [CHECKS[key](ev) for key in applicable(ev.controller)]
