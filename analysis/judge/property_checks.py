"""The gate's property checks: each documented property measured from the evidence and judged against the contract.

Pure functions of :class:`repro.runners.evidence.Evidence` (no kernel runs here), each returning a
:class:`analysis.judge.findings.Finding`; :mod:`analysis.judge.property_records` says which row each check is
and what it needs, :mod:`analysis.present.property_columns` how its columns read. Float32 comparisons are
bitwise (``view(np.uint32)``) unless the property states a tolerance (the per-step rates, "about 34 steps").
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable

import numpy as np

from analysis.judge import design_measures
from analysis.judge.findings import Difference, Finding, Where
from analysis.judge.reading import significant
from analysis.judge.source_lines import code_lines
from repro.core import spec
from repro.core.contract import Controller
from repro.core.f32 import F32, bits, differs_beyond_nan, same
from repro.core.spec import Rule, band_edges
from repro.runners.evidence import Evidence
from repro.runners.inference import Behaviour
from repro.runners.runner import Run
from repro.runners.scenarios import WARM_UP_RATES


def _float_or_none(x) -> float | None:
    """``x`` (a NumPy scalar, a float32) as a Python float for a finding's record; None stays None."""
    return None if x is None else float(x)


def _limits(ctrl: Controller) -> tuple[np.float32, np.float32]:
    """The floor and ceiling as float32, or 0 and +inf where the rule has none."""
    floor, ceiling = ctrl.bound("floor"), ctrl.bound("ceiling")
    return F32(0.0 if floor is None else floor), F32(np.inf if ceiling is None else ceiling)


def _valid_runs(ev: Evidence) -> list[Run]:
    """Catalogue runs with ordinary inputs: λ0 within the bounds, not the bad-value family."""
    floor, ceiling = _limits(ev.controller)
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
    return Where(scenario=sc.name, event=event, step=step, lam=_float_or_none(r.lam[step - 1]),
                 expected=_float_or_none(expected), reference=reference,
                 kl=_float_or_none(sc.kl[step - 1]), target=_float_or_none(sc.target[step - 1]))


def bound_held(ev: Evidence, key: str, scenarios: tuple[str, ...]) -> Finding:
    """The floor (never crossed downward) or the ceiling (upward) over the valid runs, reached and held in ``scenarios``."""
    doc = ev.controller[key]
    bound = F32(doc.value)
    lowest = key == "floor"
    extreme, where = None, None
    for r in _valid_runs(ev):
        step = first_step(r.lam < bound if lowest else r.lam > bound)
        if step is not None and where is None:
            where = _at(r, step, "crossed", bound, "contract")
        value = r.lam.min() if lowest else r.lam.max()
        extreme = value if extreme is None else (min if lowest else max)(extreme, value)
    held = {}
    for name in scenarios:
        r = ev.run(name)
        step, stays = reached_and_held(r.lam, bound)
        held[name] = step if stays else None
        if not stays and where is None:
            where = Where(scenario=name, event="never_settles", step=r.scenario.steps, lam=_float_or_none(r.lam[-1]),
                          expected=_float_or_none(bound), reference="contract")
    if ev.controller.stateful:  # how fast a stateful rule reaches a bound is its equations' (spec_agreement): not held
        held, where = {}, where if where is None or where.event == "crossed" else None
        ok = where is None
    else:
        ok = where is None and extreme == bound
    title = f"{key} (never crossed{'' if ev.controller.stateful else ', reached and held'})"
    return Finding(key=key, title=title, ok=ok, unit="λ", documented=doc.value, predicted=bound, measured=extreme,
                   detail={"extreme": "lowest" if lowest else "highest", "held_from": held}, where=where,
                   line=doc.line, doc=doc.doc)


#: Relative tolerance of a per-step rate that the contract derives rather than states (the proportional rule).
DERIVED_RTOL = 1e-6


def _rate_doc(ctrl: Controller, key: str) -> tuple[dict, float, float, str, int]:
    """(how the rate is documented, per-step factor, rtol, doc, line) of the ramp or decay rate.

    The first item is ``{"op": "mul"|"div", "value": …}`` or, for the proportional rule,
    ``{"op": "proportional", "sign": ±1, "clip": …, "n_steps": …, "horizon": …}``.
    """
    if ctrl.has(key):
        doc = ctrl[key]
        if doc.op == "div":
            return {"op": "div", "value": doc.value}, 1.0 / doc.value, doc.rtol, doc.doc, doc.line
        return {"op": "mul", "value": doc.value}, doc.value, doc.rtol, doc.doc, doc.line
    # proportional: the saturated multiplier 1 ± clip·n_steps/horizon (real arithmetic)
    sign = 1.0 if key == "ramp" else -1.0
    clip, n, h = (ctrl.value(k) for k in ("clip", "n_steps", "horizon"))
    doc = ctrl["horizon"]
    form = {"op": "proportional", "sign": sign, "clip": clip, "n_steps": n, "horizon": h}
    return form, 1.0 + sign * clip * n / h, DERIVED_RTOL, doc.doc, doc.line


def rate_per_step(ev: Evidence, key: str, scenario: str) -> Finding:
    form, factor, rtol, doc, line = _rate_doc(ev.controller, key)
    r = ev.run(scenario)
    lam = np.concatenate([[r.scenario.lambda0], r.lam]).astype(np.float64)
    lo, hi = _limits(ev.controller)
    # Steps between normal floats, off the bounds: subnormal λ rounds coarsely, and ±inf has no ratio.
    tiny, big = float(np.finfo(F32).tiny), float(np.finfo(F32).max)
    free = (lam[1:] > lo) & (lam[1:] < hi) & (lam[:-1] > 0) & (np.minimum(lam[1:], lam[:-1]) >= tiny)
    free &= np.maximum(lam[1:], lam[:-1]) <= big
    # A step that leaves λ unchanged under sustained KL is a clamp (at a bound the contract may not know):
    # it says nothing about the rate.
    free &= lam[1:] != lam[:-1]
    ratios = lam[1:][free] / lam[:-1][free]
    if ratios.size == 0:
        ok, median, where = False, None, Where(scenario=scenario, event="no_free_step")
    else:
        median = float(np.median(ratios))
        worst_at = int(np.argmax(np.abs(ratios - factor)))
        worst = ratios[worst_at]
        ok = all(math.isclose(x, factor, rel_tol=rtol, abs_tol=0.0) for x in (median, float(worst)))
        where = None if ok else _at(r, int(np.flatnonzero(free)[worst_at]) + 1, "ratio", worst, "step ratio")
    return Finding(key=key, title=f"{key} rate (× per step, rtol {rtol:g})", ok=ok, unit="×/step",
                   documented=factor, predicted=factor, measured=median,
                   detail={"form": form, "rtol": rtol, "free_steps": int(ratios.size)}, where=where, line=line, doc=doc)


def _steps_to(r: Run, factor: float) -> int | None:
    """First step at which λ reaches ``factor``·λ0 (≥ for factor > 1, ≤ for factor < 1)."""
    goal = float(r.scenario.lambda0) * factor
    lam = r.lam.astype(np.float64)
    return first_step(lam >= goal if factor > 1 else lam <= goal)


def steps_to_factor(ev: Evidence, key: str, scenarios: tuple[str, ...], factor: float, title: str) -> Finding:
    """Steps to double (``factor`` 2, ramping) or to halve (0.5, decaying) λ0 in ``scenarios``. Judged against
    the documented count where the contract states one; else against the closed form of the rule's rate,
    within one step (float32 rounding moves the crossing by at most one)."""
    ctrl = ev.controller
    _, per_step, _, text, line = _rate_doc(ctrl, "ramp" if factor > 1 else "decay")
    predicted = spec.steps_to_double(per_step) if factor > 1 else spec.steps_to_halve(per_step)
    if ctrl.has(key):
        doc = ctrl[key]
        accepts, text, line, documented, tol = doc.accepts, doc.doc, doc.line, doc.value, doc.tolerance
    else:
        accepts, documented, tol = (lambda c: abs(c - predicted) <= 1), None, 1.0
    counts = {name: _steps_to(ev.run(name), factor) for name in scenarios}
    bad = [n for n, c in counts.items() if c is None or not accepts(c)]
    where = None
    if bad:
        r, c = ev.run(bad[0]), counts[bad[0]]
        where = Where(scenario=bad[0], event="count", step=c, lam=_float_or_none(r.lam[c - 1] if c is not None else r.lam[-1]),
                      expected=_float_or_none(r.scenario.lambda0), reference="λ0")
    return Finding(key=key, title=title, ok=not bad, unit="steps", documented=documented, predicted=predicted,
                   measured=next(iter(counts.values())),
                   detail={"counts": counts, "lambda0": {n: float(ev.run(n).scenario.lambda0) for n in scenarios},
                           "factor": factor, "tolerance": tol, "closed_form_only": documented is None},
                   where=where, line=line, doc=text)


def steps_to_floor(ev: Evidence) -> Finding:
    ctrl = ev.controller
    doc, floor = ctrl["steps_to_floor"], ctrl.value("floor")
    r = ev.run("aligned")
    step, _ = reached_and_held(r.lam, F32(floor))
    ok = step is not None and doc.accepts(step)
    predicted = spec.steps_to_floor(ctrl.value("seed_lambda"), floor, ctrl.value("decay"))
    before = _float_or_none(r.lam[step - 2]) if step and step > 1 else None
    where = None if ok else Where(scenario="aligned", event="count", step=step, lam=before, expected=_float_or_none(floor),
                                  reference="floor")
    return Finding(key="steps_to_floor", title="steps from seed λ to the floor (the collapse)", ok=ok, unit="steps",
                   documented=doc.value, predicted=predicted, measured=step,
                   detail={"floor": floor, "lambda_before": before, "tolerance": doc.tolerance},
                   where=where, line=doc.line, doc=doc.doc)


def _warm_up(r: Run, lam: np.ndarray, floor: float | None) -> design_measures.WarmUp:
    p = r.scenario.params
    return design_measures.warm_up(lam, r.scenario.lambda0, p["restart"], p["warm_up_steps"], floor)


def warm_up_loss(ev: Evidence) -> Finding:
    """The share of λ a warming KL EMA may cost: over the catalogue's runs whose EMA restarts from 0 (the cold
    starts at a rate the contract covers, ≥ ``warm_up_rate``, and the resume that lost the EMA), λ's lowest
    value from the restart on against λ when it restarted. The spec model of the documented rule, on the same
    runs, is the prediction."""
    ctrl = ev.controller
    doc, rate = ctrl["warm_up_loss"], ctrl.value("warm_up_rate")
    names = [f"warm_up_a{a:g}" for a in WARM_UP_RATES if a >= rate] + ["resume_ema_reset"]
    runs = [ev.run(n) for n in names]  # MissingEvidence where one did not finish: not measured
    floor = ctrl.bound("floor")
    predicted = spec.run_each(Rule.of(ctrl), [(r.scenario.lambda0, r.scenario.kl, r.scenario.target) for r in runs])
    measured = {r.scenario.name: _warm_up(r, r.lam, floor) for r in runs}
    losses = {n: 1.0 - w.lowest / w.before for n, w in measured.items()}
    spec_loss = max(1.0 - w.lowest / w.before for w in (_warm_up(r, p, floor) for r, p in zip(runs, predicted, strict=True)))
    worst = max(losses, key=losses.get)
    r, w = ev.run(worst), measured[worst]
    ok = losses[worst] <= doc.value
    where = None
    if not ok:  # the first step λ falls below what the documented loss leaves of it
        restart, least = r.scenario.params["restart"], (1.0 - doc.value) * w.before
        where = _at(r, restart + first_step(r.lam[restart:].astype(np.float64) < least), "crossed", least, "documented loss")
    return Finding(key="warm_up_loss", title=f"a KL EMA warming from 0 at rate ≥ {rate:g} costs at most "
                   f"{doc.value:.0%} of λ", ok=ok, unit="share of λ", documented=doc.value, predicted=spec_loss,
                   measured=losses[worst], detail={"losses": losses, "rate": rate}, where=where, line=doc.line,
                   doc=doc.doc)


_EDGE_TEXT = {"mul": "target·{a}", "div": "target/{a}", "mul_one_plus": "target·(1+{a})", "mul_one_minus": "target·(1−{a})"}


def _edge_doc(ctrl: Controller, side: str):
    """The Documented entry and the text (``target·3``) of the band's upper or lower edge."""
    key = f"{side}_edge"
    if ctrl.has(key):
        doc = ctrl[key]
        return doc, _EDGE_TEXT[doc.form or "mul"].format(a=f"{doc.value:g}")
    doc = ctrl["tolerance"]
    return doc, f"target·{doc.value:g}" if side == "upper" else f"target/{doc.value:g}"


def dead_zone(ev: Evidence) -> Finding:
    ctrl = ev.controller
    (doc, up), (_, lo) = _edge_doc(ctrl, "upper"), _edge_doc(ctrl, "lower")
    moved = [(r, first_step(bits(r.lam) != bits(r.scenario.lambda0))) for r in ev.dead_zone]
    moved = [(r, step) for r, step in moved if step is not None]
    where = _at(moved[0][0], moved[0][1], "moved", moved[0][0].scenario.lambda0, "λ0") if moved else None
    title = (f"dead zone [{lo}, {up}] holds λ bit for bit" if ctrl.has("upper_edge")
             else f"dead zone [target/{doc.value:g}, {doc.value:g}·target] holds λ bit for bit")
    n = len(ev.dead_zone)
    return Finding(key="dead_zone", title=title, ok=not moved, unit="probes", documented=n, predicted=n,
                   measured=n - len(moved),
                   detail={"lower": lo, "upper": up, "tolerance": doc.value, "steps": ev.dead_zone[0].scenario.steps,
                    "edges_documented": ctrl.has("upper_edge")},
                   where=where, line=doc.line, doc=doc.doc)


def band_onset(ev: Evidence, which: str) -> Finding:
    doc, sym = _edge_doc(ev.controller, "upper" if which == "ramp" else "lower")
    rule = Rule.of(ev.controller)
    edge_key, rel = ("above", ">") if which == "ramp" else ("below", "<")
    expected = np.array([band_edges(t, rule)[edge_key] for t in ev.probe_targets], dtype=F32)
    found = ev.onsets[which]
    ratio = found.astype(np.float64) / ev.probe_targets
    ok = same(found, expected)
    where = None
    if not ok:
        i = np.flatnonzero(bits(found) != bits(expected))[0]
        where = Where(scenario=f"onset probe, target {significant(ev.probe_targets[i])}", event="onset",
                      expected=_float_or_none(expected[i]), reference="contract", kl=_float_or_none(found[i]),
                      target=_float_or_none(ev.probe_targets[i]))
    documented = float(np.median(expected.astype(np.float64) / ev.probe_targets))
    measured = float(np.nanmedian(ratio)) if np.isfinite(ratio).any() else None
    return Finding(key=f"{which}_onset", title=f"{which} begins at KL {rel} {sym} (strict, float32)", ok=ok, unit="×target",
                   documented=documented, predicted=documented, measured=measured,
                   detail={"edge": sym, "relation": rel, "ratios": [_float_or_none(x) for x in ratio],
                    "targets": [_float_or_none(t) for t in ev.probe_targets], "onsets": [_float_or_none(x) for x in found],
                    "expected": [_float_or_none(x) for x in expected]},
                   where=where, line=doc.line, doc=doc.doc)


def _differs(r: Run, expected: np.ndarray, reference: str, mask: np.ndarray, event: str = "differs") -> Where | None:
    """Where run ``r`` first differs from ``expected`` (``mask``: the steps that differ); None where it never does."""
    step = first_step(mask)
    return None if step is None else _at(r, step, event, expected[step - 1], reference)


def guards(ev: Evidence) -> Finding:
    """KL, target or λ ≤ 0: λ unchanged where the rule is guarded (the suite's convention); where the source
    has no guard (a peer), each case is what the spec model of the source's rule gives, bit for bit."""
    ctrl = ev.controller
    if ctrl.guarded:
        expected = [np.full(r.lam.shape, r.scenario.lambda0, dtype=F32) for r in ev.guards]
        title, reference, event = "KL ≤ 0, target ≤ 0 or λ ≤ 0 leave λ unchanged", "λ0", "moved"
    else:
        expected = spec.run_each(Rule.of(ctrl), [(r.scenario.lambda0, r.scenario.kl, r.scenario.target) for r in ev.guards])
        title = "no guard (as the source): KL ≤ 0, target ≤ 0 or λ ≤ 0 follow the rule"
        reference, event = "spec", "differs"
    found = [(r, _differs(r, want, reference, differs_beyond_nan(r.lam, want), event))
             for r, want in zip(ev.guards, expected, strict=True)]
    broken = [(r, where) for r, where in found if where is not None]
    starts, start_broken = _from_starts(ev, "guards")
    n = len(ev.guards)
    first = broken[0][1] if broken else start_broken[0][1] if start_broken else None
    return Finding(key="guards", title=title, ok=not broken and not start_broken, unit="cases", documented=n, predicted=n,
                   measured=n - len(broken),
                   detail={"broken": [r.scenario.name for r, _ in broken], "guarded": ctrl.guarded,
                           **_starts_detail(starts, start_broken)},
                   where=first, line=0, doc=ctrl.guards_doc)


def _from_starts(ev: Evidence, row: str) -> tuple[list[Run], list[tuple[Run, Where]]]:
    """The ``starts`` runs this row judges (their ``row`` parameter), and those that differ
    from the spec model of the contract's rule, bit for bit (a NaN matches a NaN), with where they first do."""
    runs = [r for r in ev.starts if r.scenario.params["row"] == row]
    expected = spec.run_each(Rule.of(ev.controller), [(r.scenario.lambda0, r.scenario.kl, r.scenario.target) for r in runs])
    found = [(r, _differs(r, want, "spec", differs_beyond_nan(r.lam, want))) for r, want in zip(runs, expected, strict=True)]
    return runs, [(r, where) for r, where in found if where is not None]


def _starts_detail(runs: list[Run], broken: list[tuple[Run, Where]]) -> dict:
    """What a row's cases from other starting λ showed: how many, from which λ0, which differ from the spec."""
    starts = {r.scenario.params["start"]: float(r.scenario.lambda0) for r in runs}
    return {"starts": starts, "start_cases": len(runs),
            "start_broken": [{"case": r.scenario.params["case"], "start": r.scenario.params["start"],
                              "lambda0": float(r.scenario.lambda0), "lambda": w.lam, "spec": w.expected, "step": w.step}
                             for r, w in broken]}


def _start_differences(row: Finding, kind: str) -> list[Difference]:
    """A failing row's cases from other starting λ as differences (three at most; a case that already fails
    from the seed λ is said once, by the pinned case)."""
    named_cases = {case for case, _, _ in (row.where.cases if row.where else ())} | set(row.detail.get("broken", []))
    return [Difference(kind=kind, name=b["case"], documented=b["spec"], measured=b["lambda"],
                       note=f"from λ0 {significant(b['lambda0'])} ({b['start']}): λ {significant(b['lambda'])} at step "
                       f"{b['step']} where the spec model gives {significant(b['spec'])}")
            for b in row.detail.get("start_broken", []) if b["case"] not in named_cases][:3]


def guard_differences(row: Finding, b: Behaviour) -> list[Difference]:
    """A failing guards row as one difference: the cases (three at most) where λ moved; and its cases from
    other starting λ that differ from the spec model."""
    broken = ",".join(row.detail.get("broken", [])[:3])
    out = [Difference(kind="guard", name="guard", documented="unchanged", measured=broken,
                      note="λ moves where the guard must leave it")] if broken else []
    return out + _start_differences(row, "guard")


def isolation(ev: Evidence) -> Finding:
    everything = ev.scenario_runs()
    stray = [r for r in everything if r.stray]
    # A write outside the ISV (caught by the canaries around it) is shown first: it is the worse fault.
    outside = next((r for r in stray if any(i < 0 or i >= ev.isv_len for i in r.stray)), None)
    first = outside or (stray[0] if stray else None)
    mine = _own_writes(ev, stray)
    where = Where(scenario=first.scenario.name, event="stray", slots=tuple(s for s in first.stray if mine(s)),
                  expected=ev.isv_len or None) if first else None
    n = len(everything)
    written = sorted({s for r in stray for s in r.stray if mine(s)})
    state = [s.slot for s in ev.controller.state]  # a stateful entry's own slots, declared in the contract
    return Finding(key="isolation", title="only the λ slot is written" + (" and the declared state" if state else ""),
                   ok=not stray, unit="runs", documented=n, predicted=n, measured=n - len(stray),
                   detail={"lambda_slot": ev.lambda_slot, "written": written, "isv_len": ev.isv_len, "state": state},
                   where=where, line=0, doc="the controller writes λ's ISV slot and nothing else")


def _own_writes(ev: Evidence, stray: list[Run]) -> Callable[[int], bool]:
    """Whether a slot a run shows written is the candidate's own index rather than a neighbour's write outside its
    ISV: the looped harness lays the runs' ISVs end to end, so ``isv[-3]`` of one run is slot 509 of the run before
    it. A slot that such an offset, seen outside an ISV, explains (509 = 512 − 3) is a neighbour's, unless a run
    launched in a window of its own (``per_step``) writes it too."""
    n = ev.isv_len
    outside = {i for r in stray for i in r.stray if i < 0 or i >= n}
    alone = {i for r in ev.per_step for i in r.stray}
    return lambda s: not (0 <= s < n and s not in alone and (s - n in outside or s + n in outside))


def stray_write_causes(f: Finding, text: str) -> list[Difference]:
    """A failing isolation row's cause in the source: the slots written besides λ's, at the first line that
    indexes one of them (``isv[600]``, ``isv[-1]``); used where no inference explains the row (it crashed)."""
    written = f.detail.get("written") or []
    if f.ok or f.causes or not written:
        return []
    lines = code_lines(text)
    line = next((i for slot in written for i, code in enumerate(lines, 1)
                 if re.search(rf"\[\s*{slot}\s*\]", code)), 0)
    listed = ", ".join(map(str, written))
    return [Difference(kind="slot", name="writes", documented=f.detail["lambda_slot"], measured=listed, source_line=line)]


def spec_agreement(ev: Evidence) -> Finding:
    """The catalogue and the range probes (targets 1e-8 to 1e3, extreme KL, λ on its boundaries) against the spec
    model, bit for bit; each group in one run of the model (the catalogue's is shared by every candidate)."""
    wheres = []
    for runs in (ev.catalogue, ev.ranges):
        predicted = spec.run_each(spec.Rule.of(ev.controller),
                                  [(r.scenario.lambda0, r.scenario.kl, r.scenario.target) for r in runs])
        wheres += [_differs(r, want, "spec", differs_beyond_nan(r.lam, want)) for r, want in zip(runs, predicted, strict=True)]
    where = next((w for w in wheres if w is not None), None)
    compared = sum(r.scenario.steps for r in (*ev.catalogue, *ev.ranges))
    return Finding(key="spec_agreement", title="bit-identical to the float32 spec model", ok=where is None,
                   unit="steps compared", documented=None, predicted=None, measured=compared,
                   detail={"ranges": len(ev.ranges)}, where=where, line=0,
                   doc="the kernel matches the spec model bit for bit on every catalogue scenario and range probe (a NaN "
                   "matches a NaN: payloads are the backend's)")


def launch_modes(ev: Evidence) -> Finding:
    per_step = {r.scenario.name: r for r in ev.per_step}
    # Paired by scenario: a scenario that crashed in one launch mode only is the execution row's.
    pairs = [(a, per_step[a.scenario.name]) for a in ev.catalogue if a.scenario.name in per_step]
    where = next((_differs(a, b.lam, "per-step launches", bits(a.lam) != bits(b.lam))
                  for a, b in pairs if not same(a.lam, b.lam)), None)
    return Finding(key="launch_modes", title="per-step launches and the looped harness agree", ok=where is None, unit="runs",
                   documented=None, predicted=None, measured=len(ev.catalogue), detail={}, where=where, line=0,
                   doc="both launch paths give the same bits")


def outcomes(lam0: np.float32, rule: spec.Rule) -> dict[str, np.float32 | None]:
    """λ after one step under ``rule`` for each named outcome: unchanged, max, min, ramp, decay (None: no such bound)."""
    return {
        "unchanged": lam0,
        "max": rule.ceiling,
        "min": rule.floor,
        "ramp": spec.ramped(rule, lam0),
        "decay": spec.decayed(rule, lam0),
    }


def classify(lam0: np.float32, lam1: np.float32, rule: spec.Rule) -> str:
    """Name what one step did to λ: unchanged, max, min, ramp, decay, nan (a new NaN), or other (value)."""
    for name, value in outcomes(lam0, rule).items():
        if value is not None and same(value, lam1):
            return name
    # A NaN's payload is the backend's (the GPU returns its canonical NaN): any NaN λ is "nan".
    return "nan" if np.isnan(lam1) else f"other ({significant(lam1)})"


def nonfinite(ev: Evidence) -> Finding:
    rule = spec.Rule.of(ev.controller)
    table = ev.controller.nonfinite
    seen = {r.scenario.name: classify(r.scenario.lambda0, r.lam[0], rule) for r in ev.nonfinite}
    unmeasured = [k for k in table if k not in seen]  # a crash or hang in the group kept these from finishing
    seen = {k: seen.get(k, "not measured (did not finish)") for k in table}
    # "nan" (λ becomes NaN) is met by any NaN, including a NaN λ's own bits kept.
    nan = {r.scenario.name for r in ev.nonfinite if np.isnan(r.lam[0])}
    wrong = tuple((k, seen[k], pinned) for k, pinned in table.items() if seen[k] != pinned and not (pinned == "nan" and k in nan))
    where = Where(scenario=wrong[0][0], event="cases", cases=wrong) if wrong else None
    n = len(table)
    lambda0 = {r.scenario.name: float(r.scenario.lambda0) for r in ev.nonfinite}
    lambda1 = {r.scenario.name: float(r.lam[0]) for r in ev.nonfinite}
    starts, start_broken = _from_starts(ev, "nonfinite")
    detail = {"seen": seen, **({"unmeasured": unmeasured} if unmeasured else {}), "lambda0": lambda0, "lambda1": lambda1,
              **_starts_detail(starts, start_broken)}
    if unmeasured and {k for k, _, _ in wrong} <= set(unmeasured) and not start_broken:
        detail["not_measured"] = f"{', '.join(unmeasured)} did not finish (see the execution row)"  # no case that ran is wrong
    if where is None and start_broken:
        where = start_broken[0][1]
    return Finding(key="nonfinite", title="NaN and ±inf inputs behave as characterised (from several λ0)",
                   ok=not wrong and not start_broken, unit="cases",
                   documented=n, predicted=n, measured=n - len(wrong), detail=detail, where=where,
                   line=ev.controller.nonfinite_line,
                   doc="characterised by measurement and pinned in the contract's [nonfinite] table")


_CLAMP = {"max": ("ceiling", "fminf"), "min": ("floor", "fmaxf")}


def nonfinite_differences(row: Finding, b: Behaviour) -> list[Difference]:
    """A failing nonfinite row's NaN/inf semantics that differ from the pinned table, each said in words.

    A case whose λ is the pinned outcome under the measured constants (a decay by the
    candidate's own factor) differs by a constant, not by its NaN/inf semantics.
    """
    if row.where is None:
        return []
    out = _start_differences(row, "nonfinite")
    measured = None
    if None not in (b.floor, b.ceiling, b.ramp, b.decay, b.upper):
        measured = spec.Rule(F32(b.floor), F32(b.ceiling), F32(b.upper.factor), F32(b.ramp), F32(b.decay))
    for case, seen, pinned in row.where.cases:
        if case not in row.detail["lambda1"]:  # not measured: the case crashed or hung (the execution row says so)
            continue
        lam0, lam1 = row.detail["lambda0"][case], row.detail["lambda1"][case]
        if measured is not None and same(outcomes(F32(lam0), measured)[pinned], F32(lam1)):
            continue
        if pinned in _CLAMP and np.isnan(lam1):
            bound, fn = _CLAMP[pinned]
            note = f"propagates NaN through the {bound} clamp where {fn} returns the other operand"
        elif pinned == "unchanged":
            note = f"λ {seen} where the documented comparisons with NaN/inf are false and leave λ unchanged"
        else:
            note = f"λ {seen} where the contract pins {pinned}"
        out.append(Difference(kind="nonfinite", name=case, documented=pinned, measured=seen, contract_key="nonfinite",
                              line=row.line, note=note))
    return out


def _limit_text(ev: Evidence) -> str:
    """The limits the candidate ran under, in words."""
    lim = ev.limits
    if lim is None:
        return "in process"
    if lim.fixed is not None:
        return f"{lim.fixed:g} s per experiment group"
    low, high = min(lim.per_group.values()), max(lim.per_group.values())
    span = f"{low:.2g}" if f"{low:.2g}" == f"{high:.2g}" else f"{low:.2g}–{high:.2g}"
    return (f"{span} s per experiment group: {lim.factor:g}× the reference's time, at least "
            f"{lim.floor:g} s" + (f", of CPU time (wall-clock capped at {lim.stall_cap:g}×)" if lim.stall_cap else "")
            + f"; budget {lim.budget:.3g} s")


def execution(ev: Evidence) -> Finding:
    """Every experiment ran to its end in every build: no crash (signal), no time-out, nothing left unrun.

    A fault in the coverage build (host, ``-O0 --coverage``) where the gated build ran the group is a
    difference between the builds (a loop one compiler removes, a hang only under coverage): it fails too."""
    faults = [f.describe() for f in ev.faults]
    if ev.coverage is not None:
        gated = ev.backend or "gated"
        for f in ev.coverage.faults:
            differs = f.group in ev.groups_run and not any(g.group == f.group for g in ev.faults)
            faults.append(f"coverage build: {f.describe()}"
                          + (f" where the {gated} build ran it (the builds behave differently)" if differs else ""))
    described = "; ".join(faults[:3]) + (f"; {len(faults) - 3} more" if len(faults) > 3 else "")
    detail = {"limit": _limit_text(ev), "faults": faults}
    waits = [*(ev.limits.waits if ev.limits else ()),
             *(f"coverage build: {w}" for w in (ev.coverage.waits if ev.coverage else ()))]
    if waits:  # a loaded machine kept a worker waiting: what it cost is on the record
        detail["waited"] = waits
    if ev.skipped:  # a scenario that hung is not run again in a later group
        detail["not_run_again"] = [f"{group}: {scenario} ({why})" for group, scenario, why in ev.skipped]
    return Finding(key="execution", title="runs every experiment to its end (no crash, no hang)", ok=not faults,
                   unit="faults", documented=0, predicted=0, measured=len(faults), detail=detail,
                   where=Where(scenario=described, event="fault") if faults else None, line=0,
                   doc="a controller step is a bounded, memory-safe function of the ISV")


def single_thread(ev: Evidence) -> Finding:
    """Only thread 0 of block 0 changes the ISV, whatever grid the kernel is launched on."""
    doc = "kernel: single-thread kernel (only threadIdx.x == 0 of blockIdx.x == 0 acts)"
    probe = ev.threads
    title = "only thread 0 of block 0 changes the ISV"
    if probe is None:
        return Finding(key="single_thread", title=title, ok=False, unit="threads", documented=None, predicted=None,
                       measured=None, detail={"not_measured": "the thread probe did not finish (see the execution row)"},
                       where=None, line=0, doc=doc)
    others = [(regime, probe.coords[i]) for regime, row in probe.changed.items() for i, c in enumerate(row)
              if c and probe.coords[i] != (0, 0)]
    n = len(probe.coords) - 1
    quiet = n - len({c for _, c in others})
    described = "; ".join(f"KL {r}: threadIdx.x {t}, blockIdx.x {b} changed the ISV" for r, (t, b) in others[:3])
    return Finding(key="single_thread", title=f"{title} (blockDim {probe.dims[0]}, gridDim {probe.dims[3]})", ok=not others,
                   unit="other threads left the ISV unchanged", documented=n, predicted=n, measured=quiet,
                   detail={"acting": [list(c) for _, c in others]},
                   where=Where(scenario=described, event="threads") if others else None,
                   line=0, doc=doc)


def no_atomics(ev: Evidence) -> Finding:
    st = ev.static
    return Finding(key="no_atomics", title="no atomic instructions in the PTX (atom./red.)", ok=not st.atomics,
                   unit="atomic instructions", documented=0, predicted=0, measured=len(st.atomics),
                   detail={"atomics": list(st.atomics), "nvrtc": st.nvrtc, "arch": st.arch},
                   where=Where(scenario=f"PTX has {', '.join(st.atomics)}", event="static") if st.atomics else None, line=0,
                   doc="kernel: Per `feedback_no_atomicadd`: single-thread kernel, no atomics.")


def resources(ev: Evidence) -> Finding:
    """Informational: the candidate's GPU resources as NVRTC's ptxas reports them (not gated)."""
    st = ev.static
    return Finding(key="resources", title=f"GPU resources ({st.arch}, reported, not gated)", ok=True, unit="registers",
                   documented=None, predicted=None, measured=st.registers,
                   detail={"global_stores": st.global_stores, "local_accesses": st.local_accesses,
                                  "spill_bytes": st.spill_bytes, "stack_bytes": st.stack_bytes or 0,
                                  "registers": st.registers},
                   where=None, line=0, doc="informational")


def coverage(ev: Evidence, required: bool) -> Finding:
    """Lines and branches of the candidate the experiments executed (a failure only when required)."""
    cov = ev.coverage
    ok = cov.complete or not required
    total = len(cov.lines) + cov.branches_total
    return Finding(key="coverage",
                   title="every line and branch of the candidate ran (gcov)" + ("" if required else ", reported"), ok=ok,
                   unit="lines and branches", documented=total, predicted=total, measured=cov.lines_hit + cov.branches_hit,
                   detail={"summary": cov.summary(), "required": required, "uncovered_lines": cov.uncovered_lines,
                           "partial_branch_lines": cov.partial_branch_lines},
                   where=None if cov.complete else Where(scenario=cov.missed(), event="coverage"), line=0,
                   doc="--require-coverage" if required else "informational")


def _token_lines(tokens: tuple[tuple[int, str], ...]) -> list[int]:
    return sorted({line for line, _ in tokens})


def device_view(ev: Evidence) -> Finding:
    """The candidate's own text preprocesses to the same tokens for every device compiler (NVRTC, nvcc's device
    pass, each GPU architecture the team builds for) as for the host build: else the GPU runs code that no CPU
    run measured. Each difference is named by the candidate's lines (the conditional group holding them)."""
    dv = ev.device_views
    host = dv.host
    host_text = [tok for _, tok in host.tokens]
    differing = []  # (view, host lines, device lines, host text, device text) of the first difference per view
    for view in dv.devices:
        if view.error:
            differing.append({"view": view.name, "error": view.error, "host_lines": [], "device_lines": [],
                              "host": "", "device": ""})
            continue
        device_text = [tok for _, tok in view.tokens]
        if device_text == host_text:
            continue
        blocks = [op for op in difflib.SequenceMatcher(None, host_text, device_text, autojunk=False).get_opcodes()
                  if op[0] != "equal"]
        host_lines = sorted({ln for _, i1, i2, _, _ in blocks for ln in _token_lines(host.tokens[i1:i2])})
        device_lines = sorted({ln for _, _, _, j1, j2 in blocks for ln in _token_lines(view.tokens[j1:j2])})
        _, i1, i2, j1, j2 = blocks[0]
        differing.append({"view": view.name, "error": "", "host_lines": host_lines, "device_lines": device_lines,
                          "host": " ".join(host_text[i1:i2]), "device": " ".join(device_text[j1:j2])})
    unknown = list(dv.unmodelled)  # macros a condition names that no view defines: a compiler may define them
    lines = sorted({ln for d in differing for ln in d["host_lines"] + d["device_lines"]} | {ln for ln, _ in unknown})
    groups = [c for c in dv.conditionals if any(c.first <= ln <= c.last for ln in lines)]
    innermost = [c for c in groups if not any(o is not c and c.first <= o.first and o.last <= c.last for o in groups)]
    n = len(dv.devices)
    where = None
    if differing:
        views = ", ".join(d["view"] for d in differing)
        first = differing[0]
        if first["error"]:
            first_difference = f"{first['view']}: the preprocessor stops: {first['error']}"
        else:
            first_difference = (f"the GPU builds `{first['device'] or '(nothing)'}` where the CPU build has "
                    f"`{first['host'] or '(nothing)'}` (line(s) {', '.join(map(str, lines))})")
        at = "; ".join(f"lines {c.first}–{c.last} ({c.directive})" for c in innermost)
        where = Where(scenario=f"{views} differ from the host build" + (f" at {at}" if at else "") + f": {first_difference}",
                      event="device_view")
    elif unknown:
        names = ", ".join(dict.fromkeys(name for _, name in unknown))
        where = Where(scenario=f"line(s) {', '.join(str(ln) for ln, _ in unknown)}: the text names {names}: a macro no "
                      "view here defines, one whose value differs between this build and the GPU's (the file's path, "
                      "the build's date), or what only the host build applies (a compile option, code run at load); a "
                      "compiler may build code the CPU gate never measured",
                      event="device_view")
    return Finding(key="device_view", title="the device compilers see the kernel the host build runs",
                   ok=not differing and not unknown,
                   unit="device views", documented=n, predicted=n, measured=n - len(differing),
                   detail={"views": [v.name for v in dv.devices], "differing": differing, "lines": lines,
                           "conditionals": [[c.first, c.last, c.directive] for c in innermost],
                           "unmodelled": [[ln, name] for ln, name in unknown]},
                   where=where, line=0,
                   doc="the CPU gate measures what the GPU runs: no difference between the device and host preprocessing")


def device_view_causes(f: Finding, text: str) -> list[Difference]:
    """A failing device_view row's cause at the candidate's line: the conditional group that differs (else the
    first differing line)."""
    if f.ok or not (f.detail.get("differing") or f.detail.get("unmodelled")):
        return []
    groups = f.detail["conditionals"]
    line = groups[0][0] if groups else (f.detail["lines"] or [0])[0]
    shown = "; ".join(f"lines {a}–{b} ({directive})" for a, b, directive in groups) or \
        f"line(s) {', '.join(map(str, f.detail['lines']))}"
    return [Difference(kind="device_view", name="preprocessing", documented="the host build's tokens",
                       measured=", ".join(d["view"] for d in f.detail["differing"])
                       or "macros no view defines: " + ", ".join(n for _, n in f.detail["unmodelled"]), source_line=line,
                       note=f"{shown}: preprocessed differently for the GPU; the CPU gate cannot measure the GPU's code "
                       "(make the kernel's text the same for every compiler)")]


def outside_state(ev: Evidence) -> Finding:
    """The kernel keeps no state outside the ISV: on the host build, none of its own writable data objects (a
    ``__device__`` or ``__constant__`` variable, a ``static``) changed over the runs; in the PTX (where NVRTC ran),
    no store goes anywhere but through the ISV pointer."""
    st, static = ev.state, ev.static
    unread = ("" if st is not None and st.measured and st.runs else
              "this backend's build cannot be read for its data" if st is None else
              f"the host build's data could not be read ({st.why})" if not st.measured else
              "the host build's data was read in a worker that ran no experiment (started after a hang)")
    st = None if unread else st
    changed = [list(c) for c in st.changed] if st is not None else []
    stores = list(static.outside_stores) if static is not None else []
    sources = (["host build's data"] if st is not None else []) + (["PTX"] if static is not None else [])
    detail = {"changed": changed, "objects": list(st.objects) if st is not None else [], "stores": stores,
              "sources": sources, **({"unread": unread} if unread else {})}
    if not sources:
        detail["not_measured"] = f"{unread}, and NVRTC's PTX rule did not run"
    bad = [f"{name} differs from its load image" for name, _ in changed] + [f"PTX {s}" for s in stores]
    where = Where(scenario="state outside the ISV: " + "; ".join(bad[:4]), event="state") if bad else None
    return Finding(key="outside_state", title="no state outside the ISV (device variables, statics)",
                   ok=bool(sources) and not bad, unit="objects", documented=0, predicted=0, measured=len(bad),
                   detail=detail, where=where, line=0, doc="kernel: Per `feedback_cpu_is_read_only`: all state in ISV.")


def outside_state_causes(f: Finding, text: str) -> list[Difference]:
    """A failing outside_state row's cause: the first line that declares one of the objects written."""
    names = [name for name, _ in f.detail.get("changed", [])]
    names += [m.group(1) for s in f.detail.get("stores", []) for m in [re.search(r"\[([A-Za-z_][\w:]*)", s)] if m]
    names = [name.split("::")[-1] for name in names]  # a function-local static: the function's name, then its own
    if f.ok or not names:
        return []
    lines = code_lines(text)
    line = next((i for name in names for i, code in enumerate(lines, 1) if re.search(rf"\b{re.escape(name)}\b", code)), 0)
    return [Difference(kind="state", name="state", documented="the ISV only", measured=", ".join(dict.fromkeys(names)),
                       source_line=line,
                       note=f"keeps state outside the ISV in {', '.join(dict.fromkeys(names))}: it survives across "
                       "launches, checkpoints and CUDA graph replays unlike the ISV (keep it in an ISV slot)")]


def vanishing_summary(r: Run) -> dict:
    """What sustained aligned KL, then sustained high KL, did to λ in the ``vanishing`` run.

    Keys: first_subnormal, first_zero (1-based steps or None), settled (λ at the end of the aligned
    stretch), recovered (first step of the high stretch, counted from its start, at which λ is back at
    λ0 or above; None if never), final (λ at the end).
    """
    n = int(r.scenario.params["aligned_steps"])
    lam = r.lam
    tiny = np.finfo(F32).tiny
    sub = first_step((lam[:n] > 0) & (lam[:n] < tiny))
    zero = first_step(lam[:n] == 0)
    back = first_step(lam[n:] >= r.scenario.lambda0)
    return {"first_subnormal": sub, "first_zero": zero, "settled": F32(lam[n - 1]), "recovered": back,
            "final": F32(lam[-1])}


@functools.lru_cache(maxsize=64)
def _spec_vanishing(rule: Rule, lambda0: np.float32, n: int, kl_low: np.float32, kl_high: np.float32,
                    target: np.float32) -> np.ndarray:
    """The spec's λ over the vanishing scenario (cached: tens of thousands of steps for the slow rules): the
    aligned half starts as the spec's own settling (computed once for the scenario's length), then steps on."""
    head = spec.settling(rule, F32(lambda0), F32(kl_low), F32(target))[:n]
    kl = np.concatenate([np.full(n - len(head), kl_low, F32), np.full(n, kl_high, F32)])
    start = head[-1] if len(head) else F32(lambda0)
    rest = spec.run(rule, [start], kl[:, None], np.full((len(kl), 1), target, F32))[:, 0]
    return np.concatenate([head, rest])


def vanishing(ev: Evidence) -> Finding:
    """A rule with no floor: does aligned KL drive λ to a subnormal or to 0 (where the λ ≤ 0 guard, or in a
    peer the multiplication itself, holds it), and does high KL bring it back? Judged against the spec model's
    prediction, bit for bit."""
    doc = ev.controller["floor"]
    r = ev.vanishing[0]
    sc = r.scenario
    n = int(sc.params["aligned_steps"])
    expected = _spec_vanishing(spec.Rule.of(ev.controller), sc.lambda0, n, sc.kl[0], sc.kl[-1], sc.target[0])
    got, want = vanishing_summary(r), vanishing_summary(Run(r.scenario, expected, []))
    ok = same(r.lam, expected)
    where = None if ok else _differs(r, expected, "spec", bits(r.lam) != bits(expected))
    detail = {key: {k: (_float_or_none(v) if isinstance(v, np.floating) else v) for k, v in summary.items()}
              for key, summary in (("measured", got), ("spec", want))}
    return Finding(key="vanishing", title="no floor: λ under aligned KL, then high KL (subnormal, 0, recovery)", ok=ok,
                   unit="steps", documented=None, predicted=want["first_zero"] or want["first_subnormal"],
                   measured=got["first_zero"] or got["first_subnormal"], detail=detail, where=where,
                   line=doc.line, doc=doc.doc)
