"""Verdicts: each documented property measured from the evidence and judged against the contract.

Pure functions of :class:`repro.runners.campaign.Evidence` (no kernel runs here).
Float32 comparisons are bitwise (``view(np.uint32)``) unless the property
states a tolerance (the per-step rates, "about 34 steps").
"""

from __future__ import annotations

import functools
import math

import numpy as np

from analysis.judge.findings import Finding, Where
from repro.core import spec
from repro.core.contract import Controller
from repro.core.spec import Rule, band_edges
from repro.runners.campaign import Evidence, MissingEvidence
from repro.runners.runner import Run

F32 = np.float32


def bits(a) -> np.ndarray:
    return np.asarray(a, dtype=F32).view(np.uint32)


def same(a, b) -> bool:
    """Bitwise equality of float32 arrays (NaN payloads included)."""
    return bool(np.array_equal(bits(a), bits(b)))


def differs_beyond_nan(a, b) -> np.ndarray:
    """Where float32 arrays differ in their bits, a NaN against a NaN excepted: arithmetic on a NaN returns the
    GPU's canonical NaN but the CPU's input NaN (the peers' λ·2 with λ = NaN), and neither is the rule's choice."""
    a, b = np.asarray(a, dtype=F32), np.asarray(b, dtype=F32)
    return (bits(a) != bits(b)) & ~(np.isnan(a) & np.isnan(b))


def _f(x) -> float | None:
    return None if x is None else float(x)


def _g(x: float) -> str:
    return f"{float(x):.8g}"


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


def _rate(ev: Evidence, key: str, scenario: str) -> Finding:
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
    detail = {"form": form, "rtol": rtol, "free_steps": int(ratios.size)}
    title = f"{key} rate (× per step, rtol {rtol:g})"
    if ratios.size == 0:
        return Finding(key, title, False, "×/step", factor, factor, None, detail, Where(scenario, "no_free_step"),
                       line, doc)
    median = float(np.median(ratios))
    worst_at = int(np.argmax(np.abs(ratios - factor)))
    worst = ratios[worst_at]
    ok = all(math.isclose(x, factor, rel_tol=rtol, abs_tol=0.0) for x in (median, float(worst)))
    step = int(np.flatnonzero(free)[worst_at]) + 1
    where = None if ok else _at(r, step, "ratio", worst, "step ratio")
    return Finding(key, title, ok, "×/step", factor, factor, median, detail, where, line, doc)


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
    """Judged against the documented count where the contract states one; else against the closed form
    of the rule's rate, within one step (float32 rounding moves the crossing by at most one)."""
    ctrl = ev.controller
    if ctrl.has(key):
        doc = ctrl[key]
        accepts, text, line, documented, tol = doc.accepts, doc.doc, doc.line, doc.value, doc.tolerance
    else:
        rate = "ramp" if factor > 1 else "decay"
        _, _, _, text, line = _rate_doc(ctrl, rate)
        accepts, documented, tol = (lambda c: abs(c - predicted) <= 1), None, 1.0
    counts = {name: _steps_to(ev.run(name), factor) for name in scenarios}
    bad = [n for n, c in counts.items() if c is None or not accepts(c)]
    where = None
    if bad:
        r, c = ev.run(bad[0]), counts[bad[0]]
        where = Where(bad[0], "count", c, _f(r.lam[c - 1] if c is not None else r.lam[-1]), _f(r.scenario.lambda0), "λ0")
    lambda0 = {n: float(ev.run(n).scenario.lambda0) for n in scenarios}
    return Finding(key, title, not bad, "steps", documented, predicted, next(iter(counts.values())),
                   {"counts": counts, "lambda0": lambda0, "factor": factor, "tolerance": tol,
                    "closed_form_only": documented is None}, where, line, text)


def steps_to_double(ev: Evidence) -> Finding:
    return _count(ev, "steps_to_double", ("diverged", "ramp_from_floor"), 2.0,
                  spec.steps_to_double(_rate_doc(ev.controller, "ramp")[1]), "steps to double (sustained high KL)")


def steps_to_halve(ev: Evidence) -> Finding:
    return _count(ev, "steps_to_halve", ("decay_from_ceiling", "aligned"), 0.5,
                  spec.steps_to_halve(_rate_doc(ev.controller, "decay")[1]), "steps to halve (sustained low KL)")


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
    moved = [(r, s) for r, s in moved if s is not None]
    steps = ev.dead_zone[0].scenario.steps
    where = _at(moved[0][0], moved[0][1], "moved", moved[0][0].scenario.lambda0, "λ0") if moved else None
    if ctrl.has("upper_edge"):
        title = f"dead zone [{lo}, {up}] holds λ bit for bit"
    else:
        title = f"dead zone [target/{doc.value:g}, {doc.value:g}·target] holds λ bit for bit"
    n = len(ev.dead_zone)
    return Finding("dead_zone", title, not moved, "probes", n, n, n - len(moved),
                   {"lower": lo, "upper": up, "tolerance": doc.value, "steps": steps,
                    "edges_documented": ctrl.has("upper_edge")}, where, doc.line, doc.doc)


def _onset(ev: Evidence, which: str) -> Finding:
    doc, sym = _edge_doc(ev.controller, "upper" if which == "ramp" else "lower")
    rule = Rule.of(ev.controller)
    edge_key = "above" if which == "ramp" else "below"
    expected = np.array([band_edges(t, rule)[edge_key] for t in ev.probe_targets], dtype=F32)
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
    documented = float(np.median(expected.astype(np.float64) / ev.probe_targets))
    measured = float(np.nanmedian(ratio)) if np.isfinite(ratio).any() else None
    return Finding(f"{which}_onset", f"{which} begins at KL {rel} {sym} (strict, float32)", ok, "×target",
                   documented, documented, measured,
                   {"edge": sym, "relation": rel, "ratios": [_f(x) for x in ratio],
                    "targets": [_f(t) for t in ev.probe_targets], "onsets": [_f(x) for x in found],
                    "expected": [_f(x) for x in expected]}, where, doc.line, doc.doc)


def ramp_onset(ev: Evidence) -> Finding:
    return _onset(ev, "ramp")


def decay_onset(ev: Evidence) -> Finding:
    return _onset(ev, "decay")


def guards(ev: Evidence) -> Finding:
    """KL, target or λ ≤ 0: λ unchanged where the rule is guarded (the suite's convention); where the source
    has no guard (a peer), each case is what the spec model of the source's rule gives, bit for bit."""
    ctrl = ev.controller
    if ctrl.guarded:
        expected = {id(r): np.full(r.lam.shape, r.scenario.lambda0, dtype=F32) for r in ev.guards}
        title, reference = "KL ≤ 0, target ≤ 0 or λ ≤ 0 leave λ unchanged", "λ0"
    else:
        rule = Rule.of(ctrl)
        expected = {id(r): spec.run(rule, [r.scenario.lambda0], r.scenario.kl[:, None], r.scenario.target[:, None])[:, 0]
                    for r in ev.guards}
        title, reference = "no guard (as the source): KL ≤ 0, target ≤ 0 or λ ≤ 0 follow the rule", "spec"
    broken = [r for r in ev.guards if differs_beyond_nan(r.lam, expected[id(r)]).any()]
    where = None
    if broken:
        r = broken[0]
        step = first_step(differs_beyond_nan(r.lam, expected[id(r)]))
        where = _at(r, step, "moved" if ctrl.guarded else "differs", expected[id(r)][step - 1], reference)
    n = len(ev.guards)
    return Finding("guards", title, not broken, "cases", n, n, n - len(broken),
                   {"broken": [r.scenario.name for r in broken], "guarded": ctrl.guarded}, where, 0, ctrl.guards_doc)


def isolation(ev: Evidence) -> Finding:
    slot = ev.lambda_slot
    everything = ev.catalogue + ev.per_step + ev.guards + ev.nonfinite + ev.dead_zone + ev.vanishing
    stray = [r for r in everything if r.stray]
    # A write outside the ISV (caught by the canaries around it) is shown first: it is the worse fault.
    outside = next((r for r in stray if any(i < 0 or i >= ev.isv_len for i in r.stray)), None)
    first = outside or (stray[0] if stray else None)
    where = Where(first.scenario.name, "stray", slots=tuple(first.stray), expected=ev.isv_len or None) if first else None
    n = len(everything)
    written = sorted({s for r in stray for s in r.stray})
    return Finding("isolation", "only the λ slot is written", not stray, "runs", n, n, n - len(stray),
                   {"lambda_slot": slot, "written": written, "isv_len": ev.isv_len}, where, 0,
                   "the controller writes λ's ISV slot and nothing else")


def spec_agreement(ev: Evidence) -> Finding:
    rule = spec.Rule.of(ev.controller)
    where, total = None, 0
    for r in ev.catalogue:
        expected = spec.run(rule, [r.scenario.lambda0], r.scenario.kl[:, None], r.scenario.target[:, None])[:, 0]
        total += r.scenario.steps
        if where is None and differs_beyond_nan(r.lam, expected).any():
            step = first_step(differs_beyond_nan(r.lam, expected))
            where = _at(r, step, "differs", expected[step - 1], "spec")
    return Finding("spec_agreement", "bit-identical to the float32 spec model", where is None, "steps compared",
                   None, None, total, {}, where, 0,
                   "the kernel matches the spec model bit for bit on every scenario (a NaN matches a NaN: "
                   "payloads are the backend's)")


def launch_modes(ev: Evidence) -> Finding:
    where = None
    for a, b in zip(ev.catalogue, ev.per_step, strict=True):
        if not same(a.lam, b.lam):
            step = first_step(bits(a.lam) != bits(b.lam))
            where = _at(a, step, "differs", b.lam[step - 1], "per-step launches")
            break
    return Finding("launch_modes", "per-step launches and the looped harness agree", where is None, "runs",
                   None, None, len(ev.catalogue), {}, where, 0, "both launch paths give the same bits")


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
    return "nan" if np.isnan(lam1) else f"other ({_g(lam1)})"


def nonfinite(ev: Evidence) -> Finding:
    rule = spec.Rule.of(ev.controller)
    table = ev.controller.nonfinite
    seen = {r.scenario.name: classify(r.scenario.lambda0, r.lam[0], rule) for r in ev.nonfinite}
    seen = {k: seen.get(k, "not measured (did not finish)") for k in table}
    # "nan" (λ becomes NaN) is met by any NaN, including a NaN λ's own bits kept.
    nan = {r.scenario.name for r in ev.nonfinite if np.isnan(r.lam[0])}
    wrong = tuple((k, str(seen.get(k)), table[k]) for k in table
                  if seen.get(k) != table[k] and not (table[k] == "nan" and k in nan))
    where = Where(wrong[0][0], "cases", cases=wrong) if wrong else None
    n = len(table)
    lambda0 = {r.scenario.name: float(r.scenario.lambda0) for r in ev.nonfinite}
    lambda1 = {r.scenario.name: float(r.lam[0]) for r in ev.nonfinite}
    return Finding("nonfinite", "NaN and ±inf inputs behave as characterised", not wrong, "cases", n, n,
                   n - len(wrong), {"seen": seen, "lambda0": lambda0, "lambda1": lambda1}, where,
                   ev.controller.nonfinite_line,
                   "characterised by measurement and pinned in the contract's [nonfinite] table")


def execution(ev: Evidence) -> Finding:
    """Every experiment ran to its end: no crash (signal), no time-out."""
    faults = ev.faults
    limit = f"{ev.timeout:g} s per experiment group" if ev.timeout else "in process"
    described = "; ".join(f.describe() for f in faults[:3]) + (f"; {len(faults) - 3} more" if len(faults) > 3 else "")
    return Finding("execution", "runs every experiment to its end (no crash, no hang)", not faults, "faults", 0, 0,
                   len(faults), {"limit": limit, "faults": [f.describe() for f in faults]},
                   Where(described, "fault") if faults else None, 0,
                   "a controller step is a bounded, memory-safe function of the ISV")


def single_thread(ev: Evidence) -> Finding:
    """Only thread 0 of block 0 changes the ISV, whatever grid the kernel is launched on."""
    doc = "kernel: single-thread kernel (only threadIdx.x == 0 of blockIdx.x == 0 acts)"
    probe = ev.threads
    title = "only thread 0 of block 0 changes the ISV"
    if probe is None:
        return Finding("single_thread", title, False, "threads", None, None, None,
                       {"not_measured": "the thread probe did not finish (see the execution row)"}, None, 0, doc)
    others = [(regime, probe.coords[i]) for regime, row in probe.changed.items() for i, c in enumerate(row)
              if c and probe.coords[i] != (0, 0)]
    n = len(probe.coords) - 1
    quiet = n - len({c for _, c in others})
    described = "; ".join(f"KL {r}: threadIdx.x {t}, blockIdx.x {b} changed the ISV" for r, (t, b) in others[:3])
    return Finding("single_thread", f"{title} (blockDim {probe.dims[0]}, gridDim {probe.dims[3]})", not others,
                   "other threads left the ISV unchanged", n, n, quiet, {"acting": [list(c) for _, c in others]},
                   Where(described, "threads") if others else None, 0, doc)


def no_atomics(ev: Evidence) -> Finding:
    st = ev.static
    return Finding("no_atomics", "no atomic instructions in the PTX (atom./red.)", not st.atomics,
                   "atomic instructions", 0, 0, len(st.atomics),
                   {"atomics": list(st.atomics), "nvrtc": st.nvrtc, "arch": st.arch},
                   Where(f"PTX has {', '.join(st.atomics)}", "static") if st.atomics else None, 0,
                   "kernel: Per `feedback_no_atomicadd`: single-thread kernel, no atomics.")


def resources(ev: Evidence) -> Finding:
    """Informational: the candidate's GPU resources as NVRTC's ptxas reports them (not gated)."""
    st = ev.static
    return Finding("resources", f"GPU resources ({st.arch}, reported, not gated)", True, "registers", None, None,
                   st.registers, {"global_stores": st.global_stores, "local_accesses": st.local_accesses,
                                  "spill_bytes": st.spill_bytes, "stack_bytes": st.stack_bytes or 0,
                                  "registers": st.registers}, None, 0, "informational")


def coverage(ev: Evidence, required: bool = False) -> Finding:
    """Lines and branches of the candidate the experiments executed (a failure only when required)."""
    cov = ev.coverage
    ok = (cov.complete and not cov.faults) or not required
    total = len(cov.lines) + cov.branches_total
    return Finding("coverage", "every line and branch of the candidate ran (gcov)" + ("" if required else ", reported"),
                   ok, "lines and branches", total, total, cov.lines_hit + cov.branches_hit,
                   {"summary": cov.summary(), "required": required, "uncovered_lines": cov.uncovered_lines,
                    "partial_branch_lines": cov.partial_branch_lines},
                   None if cov.complete else Where(cov.summary().split("; ", 1)[1], "coverage"),
                   0, "--require-coverage" if required else "informational")


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
    """The spec's λ over the vanishing scenario (cached: tens of thousands of steps for the slow rules)."""
    kl = np.concatenate([np.full(n, kl_low, F32), np.full(n, kl_high, F32)])
    return spec.run(rule, [lambda0], kl[:, None], np.full((2 * n, 1), target, F32))[:, 0]


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
    where = None
    if not ok:
        step = first_step(bits(r.lam) != bits(expected))
        where = _at(r, step, "differs", expected[step - 1], "spec")
    value = got["first_zero"] or got["first_subnormal"]
    predicted = want["first_zero"] or want["first_subnormal"]
    plain = {k: (_f(v) if isinstance(v, np.floating) else v) for k, v in got.items()}
    spec_plain = {k: (_f(v) if isinstance(v, np.floating) else v) for k, v in want.items()}
    return Finding("vanishing", "no floor: λ under aligned KL, then high KL (subnormal, 0, recovery)", ok, "steps",
                   None, predicted, value, {"measured": plain, "spec": spec_plain}, where, doc.line, doc.doc)


#: Every property the gate judges, in its order.
CHECKS = {f.__name__: f for f in (floor, ceiling, ramp, decay, steps_to_double, steps_to_halve, steps_to_floor, vanishing,
                                  dead_zone, ramp_onset, decay_onset, guards, nonfinite, isolation, spec_agreement,
                                  launch_modes, single_thread, execution)}
#: Properties of a band (a dead zone with edges); the proportional rule has none.
BAND_ONLY = ("dead_zone", "ramp_onset", "decay_onset")


def applicable(ctrl: Controller) -> list[str]:
    """The properties judged for a contract entry: floor and ceiling where the rule has them, vanishing where
    it has no floor, steps_to_floor where documented, the band's properties for band rules."""
    def applies(key: str) -> bool:
        if key in ("floor", "ceiling"):
            return ctrl.bound(key) is not None
        if key == "vanishing":
            return ctrl.bound("floor") is None
        if key == "steps_to_floor":
            return ctrl.has("steps_to_floor")
        return key not in BAND_ONLY or ctrl.is_band

    return [key for key in CHECKS if applies(key)]


#: Experiment groups (repro.runners.campaign.GROUPS) each check reads; the others read the catalogue.
NEEDS = {"dead_zone": ("dead_zone",), "ramp_onset": ("onsets",), "decay_onset": ("onsets",), "guards": ("guards",),
         "nonfinite": ("nonfinite",), "launch_modes": ("catalogue", "per_step"), "single_thread": (),
         "execution": (), "isolation": (), "vanishing": ("vanishing",)}


def _judge_one(ev: Evidence, key: str) -> Finding:
    """One check; "not measured" (a failure) where the candidate crashed or hung in what it needs."""
    missing = [g for g in NEEDS.get(key, ("catalogue",)) if g not in ev.groups_run]
    try:
        if not missing:
            return CHECKS[key](ev)
    except MissingEvidence as err:
        missing = [f"scenario {err.args[0]!r}"]
    return Finding(key, key, False, "", None, None, None,
                   {"not_measured": f"{', '.join(missing)} did not finish (see the execution row)"})


def judge(ev: Evidence, require_coverage: bool = False) -> list[Finding]:
    """Every property that applies to the evidence's controller, in the gate's order.

    The static rows (no_atomics, resources) and the coverage row come after, where
    the evidence has them (NVRTC, gcov available).
    """
    rows = [_judge_one(ev, key) for key in applicable(ev.controller)]
    if ev.static is not None:
        rows += [no_atomics(ev), resources(ev)]
    if ev.coverage is not None:
        rows.append(coverage(ev, require_coverage))
    return rows
