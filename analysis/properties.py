"""Verdicts: each documented property measured from the evidence and judged against the contract.

Pure functions of :class:`repro.campaign.Evidence` (no kernel runs here).
Float32 comparisons are bitwise (``view(np.uint32)``) unless the property
states a tolerance (the per-step rates, "about 34 steps").
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from repro import spec
from repro.campaign import Evidence, MissingEvidence
from repro.contract import Controller
from repro.runner import Run
from repro.spec import Rule, band_edges

F32 = np.float32


@dataclass
class Finding:
    """One row of the gate: a property, its documented, predicted and measured values, a verdict."""

    key: str
    title: str
    documented: str
    predicted: str
    measured: str
    ok: bool
    where: str = ""  # the scenario and step where a failure first shows
    doc: str = ""  # the sentence that documents it
    line: int = 0  # line of contracts.toml holding the documented value
    value: float | None = None  # the measured number, where there is one

    def __post_init__(self) -> None:
        self.ok = bool(self.ok)  # NumPy bools do not serialise
        self.value = None if self.value is None else float(self.value)

    def as_dict(self) -> dict:
        return asdict(self)


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


def _bound(ev: Evidence, key: str, scenarios: tuple[str, ...], crosses) -> Finding:
    ctrl = ev.controller
    doc = ctrl[key]
    bound = F32(doc.value)
    extreme, where = None, ""
    for r in _valid_runs(ev):
        bad = crosses(r.lam, bound)
        if bad.any() and not where:
            step = first_step(bad)
            where = f"{r.scenario.name}, step {step}: λ = {_g(r.lam[step - 1])}"
        value = r.lam.min() if key == "floor" else r.lam.max()
        extreme = value if extreme is None else (min(extreme, value) if key == "floor" else max(extreme, value))
    held = []
    for name in scenarios:
        step, stays = reached_and_held(ev.run(name).lam, bound)
        held.append((name, step, stays))
        if not stays and not where:
            where = f"{name}: λ never settles at {_g(bound)} (ends at {_g(ev.run(name).lam[-1])})"
    reached = ", ".join(f"{s} ({n})" if ok else f"never ({n})" for n, s, ok in held)
    word = "lowest" if key == "floor" else "highest"
    measured = f"{word} λ {_g(extreme)}; held from step {reached}"
    ok = not where and extreme == bound
    return Finding(key, f"{key} (never crossed, reached and held)", _g(doc.value), _g(bound), measured, ok, where,
                   doc.doc, doc.line, float(extreme))


def floor(ev: Evidence) -> Finding:
    return _bound(ev, "floor", ("aligned", "decay_from_ceiling"), lambda lam, b: lam < b)


def ceiling(ev: Evidence) -> Finding:
    return _bound(ev, "ceiling", ("diverged", "ramp_from_floor"), lambda lam, b: lam > b)


#: Relative tolerance of a per-step rate that the contract derives rather than states (the proportional rule).
DERIVED_RTOL = 1e-6


def _rate_doc(ctrl: Controller, key: str) -> tuple[str, float, float, str, int]:
    """(documented text, per-step factor, rtol, doc, line) of the ramp or decay rate."""
    if ctrl.has(key):
        doc = ctrl[key]
        if doc.op == "div":
            return f"÷{_g(doc.value)}", 1.0 / doc.value, doc.rtol, doc.doc, doc.line
        return f"×{_g(doc.value)}", doc.value, doc.rtol, doc.doc, doc.line
    # proportional: the saturated multiplier 1 ± clip·n_steps/horizon (real arithmetic)
    sign = 1.0 if key == "ramp" else -1.0
    clip, n, h = (ctrl.value(k) for k in ("clip", "n_steps", "horizon"))
    doc = ctrl["horizon"]
    shown = f"×(1 {'+' if sign > 0 else '−'} {_g(clip)}·{_g(n)}/{_g(h)})"
    return shown, 1.0 + sign * clip * n / h, DERIVED_RTOL, doc.doc, doc.line


def _rate(ev: Evidence, key: str, scenario: str) -> Finding:
    documented, factor, rtol, doc, line = _rate_doc(ev.controller, key)
    r = ev.run(scenario)
    lam = np.concatenate([[r.scenario.lambda0], r.lam]).astype(np.float64)
    lo, hi = _limits(ev.controller)
    # Steps between normal floats, off the bounds: subnormal λ rounds coarsely, and ±inf has no ratio.
    tiny, big = float(np.finfo(F32).tiny), float(np.finfo(F32).max)
    free = (lam[1:] > lo) & (lam[1:] < hi) & (lam[:-1] > 0) & (np.minimum(lam[1:], lam[:-1]) >= tiny)
    free &= np.maximum(lam[1:], lam[:-1]) <= big
    ratios = lam[1:][free] / lam[:-1][free]
    predicted = f"×{_g(factor)}"
    if ratios.size == 0:
        return Finding(key, f"{key} rate (× per step)", documented, predicted,
                       "no unclamped step", False, f"{scenario}: λ never moves freely", doc, line)
    median = float(np.median(ratios))
    worst = ratios[np.argmax(np.abs(ratios - factor))]
    ok = all(math.isclose(x, factor, rel_tol=rtol, abs_tol=0.0) for x in (median, float(worst)))
    where = "" if ok else f"{scenario}: step ratio {_g(worst)}"
    return Finding(key, f"{key} rate (× per step, rtol {rtol:g})", documented, predicted,
                   f"×{median:.8f} (median of {ratios.size} unclamped steps)", ok, where, doc, line, median)


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
        accepts, text, line = doc.accepts, doc.doc, doc.line
        documented = f"{doc.value:g}" + (f" ± {doc.tolerance:g}" if doc.tolerance else "")
    else:
        rate = "ramp" if factor > 1 else "decay"
        _, _, _, text, line = _rate_doc(ctrl, rate)
        accepts, documented = (lambda c: abs(c - predicted) <= 1), f"— (closed form {predicted} ± 1)"
    counts = {name: _steps_to(ev.run(name), factor) for name in scenarios}
    ok = all(c is not None and accepts(c) for c in counts.values())
    where = "" if ok else "; ".join(f"{n}: {c}" for n, c in counts.items() if c is None or not accepts(c))
    shown = ", ".join(f"{c} from λ0 {_g(ev.run(n).scenario.lambda0)}" for n, c in counts.items())
    value = next(iter(counts.values()))
    return Finding(key, title, documented, str(predicted), shown, ok, where, text, line,
                   None if value is None else float(value))


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
    before = f"; λ after {step - 1} steps = {_g(r.lam[step - 2])}" if step and step > 1 else ""
    ok = step is not None and doc.accepts(step)
    predicted = spec.steps_to_floor(ctrl.value("seed_lambda"), ctrl.value("floor"), ctrl.value("decay"))
    return Finding("steps_to_floor", "steps from seed λ to the floor (the collapse)",
                   f"{doc.value:g} ± {doc.tolerance:g}", str(predicted),
                   f"clamped at {_g(ctrl.value('floor'))} from step {step}{before}", ok,
                   "" if ok else f"aligned: floor first reached at step {step}", doc.doc, doc.line,
                   None if step is None else float(step))


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
    where = f"{moved[0][0].scenario.name}, step {moved[0][1]}: λ → {_g(moved[0][0].lam[moved[0][1] - 1])}" if moved else ""
    if ctrl.has("upper_edge"):
        title, documented = f"dead zone [{lo}, {up}] holds λ bit for bit", f"[{lo}, {up}], edges inclusive"
    else:
        title = f"dead zone [target/{doc.value:g}, {doc.value:g}·target] holds λ bit for bit"
        documented = f"×/÷{doc.value:g}, edges inclusive"
    return Finding("dead_zone", title, documented, f"{len(ev.dead_zone)} probes × {steps} steps unchanged",
                   f"{len(ev.dead_zone) - len(moved)}/{len(ev.dead_zone)} probes held λ for {steps} steps",
                   not moved, where, doc.doc, doc.line, float(len(moved)))


def _onset(ev: Evidence, which: str) -> Finding:
    doc, sym = _edge_doc(ev.controller, "upper" if which == "ramp" else "lower")
    rule = Rule.of(ev.controller)
    edge_key = "above" if which == "ramp" else "below"
    expected = np.array([band_edges(t, rule)[edge_key] for t in ev.probe_targets], dtype=F32)
    found = ev.onsets[which]
    ratio = found.astype(np.float64) / ev.probe_targets
    ok = same(found, expected)
    bad = np.flatnonzero(bits(found) != bits(expected))
    where = "" if ok else (f"target {_g(ev.probe_targets[bad[0]])}: {which} begins at KL {_g(found[bad[0]])}, "
                           f"documented {_g(expected[bad[0]])}")
    rel = ">" if which == "ramp" else "<"
    shown = ", ".join(f"{x:.8g}" for x in ratio) + " × target"
    return Finding(f"{which}_onset", f"{which} begins at KL {rel} {sym} (strict, float32)",
                   f"KL {rel} {sym}", f"next float {'above' if which == 'ramp' else 'below'} fl32({sym})",
                   shown, ok, where, doc.doc, doc.line, float(np.nanmedian(ratio)) if np.isfinite(ratio).any() else None)


def ramp_onset(ev: Evidence) -> Finding:
    return _onset(ev, "ramp")


def decay_onset(ev: Evidence) -> Finding:
    return _onset(ev, "decay")


def guards(ev: Evidence) -> Finding:
    broken = [r for r in ev.guards if not same(r.lam, np.full(r.lam.shape, r.scenario.lambda0, dtype=F32))]
    where = ""
    if broken:
        r = broken[0]
        step = first_step(bits(r.lam) != bits(r.scenario.lambda0))
        where = f"{r.scenario.name}, step {step}: λ {_g(r.scenario.lambda0)} → {_g(r.lam[step - 1])}"
    return Finding("guards", "KL ≤ 0, target ≤ 0 or λ ≤ 0 leave λ unchanged", "unchanged",
                   "unchanged", f"{len(ev.guards) - len(broken)}/{len(ev.guards)} cases unchanged",
                   not broken, where, ev.controller.guards_doc, 0, float(len(broken)))


def isolation(ev: Evidence) -> Finding:
    slot = ev.lambda_slot
    everything = ev.catalogue + ev.per_step + ev.guards + ev.nonfinite + ev.dead_zone + ev.vanishing
    stray = [r for r in everything if r.stray]
    outside = next((r for r in everything if any(i < 0 or i >= ev.isv_len for i in r.stray)), None)
    first = outside or (stray[0] if stray else None)
    where = ""
    if first:
        shown = [str(i) if 0 <= i < ev.isv_len else f"{i} (outside the {ev.isv_len}-float ISV)"
                 for i in first.stray]
        where = f"{first.scenario.name}: slot(s) {', '.join(shown)} written"
    return Finding("isolation", f"only slot {slot} (λ) is written", f"slot {slot} only", f"slot {slot} only",
                   f"{len(everything) - len(stray)}/{len(everything)} runs left every other slot's bits intact",
                   not stray, where, "DESIGN.md §2: the controller may write slot 486 and nothing else", 0,
                   float(len(stray)))


def spec_agreement(ev: Evidence) -> Finding:
    rule = spec.Rule.of(ev.controller)
    where, total = "", 0
    for r in ev.catalogue:
        expected = spec.run(rule, [r.scenario.lambda0], r.scenario.kl[:, None], r.scenario.target[:, None])[:, 0]
        total += r.scenario.steps
        if not where and differs_beyond_nan(r.lam, expected).any():
            step = first_step(differs_beyond_nan(r.lam, expected))
            where = f"{r.scenario.name}, step {step}: kernel {_g(r.lam[step - 1])}, spec {_g(expected[step - 1])}"
    return Finding("spec_agreement", "bit-identical to the float32 spec model", "identical", "identical",
                   "identical" if not where else "differs", not where, where,
                   "DESIGN.md §7: the kernel must match the spec bit for bit on every scenario "
                   "(a NaN matches a NaN: payloads are the backend's)", 0, float(total))


def launch_modes(ev: Evidence) -> Finding:
    where = ""
    for a, b in zip(ev.catalogue, ev.per_step, strict=True):
        if not same(a.lam, b.lam):
            step = first_step(bits(a.lam) != bits(b.lam))
            where = f"{a.scenario.name}, step {step}: looped {_g(a.lam[step - 1])}, per-step {_g(b.lam[step - 1])}"
            break
    return Finding("launch_modes", "per-step launches and the looped harness agree", "identical", "identical",
                   "identical" if not where else "differ", not where, where,
                   "DESIGN.md §6: both paths must give the same bits", 0)


def classify(lam0: np.float32, lam1: np.float32, rule: spec.Rule) -> str:
    """Name what one step did to λ: unchanged, max, min, ramp, decay, nan (a new NaN), or other (value)."""
    outcomes = {
        "unchanged": lam0,
        "max": rule.ceiling,
        "min": rule.floor,
        "ramp": spec.ramped(rule, lam0),
        "decay": spec.decayed(rule, lam0),
    }
    for name, value in outcomes.items():
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
    wrong = [k for k in table if seen.get(k) != table[k] and not (table[k] == "nan" and k in nan)]
    where = "; ".join(f"{k}: {seen.get(k)} (contract: {table[k]})" for k in wrong[:3])
    return Finding("nonfinite", "NaN and ±inf inputs behave as characterised", f"{len(table)} cases pinned",
                   f"{len(table)} cases", f"{len(table) - len(wrong)}/{len(table)} cases as pinned",
                   not wrong, where, "kernels/contracts.toml [nonfinite]", 0, float(len(wrong)))


def execution(ev: Evidence) -> Finding:
    """Every experiment ran to its end: no crash (signal), no time-out."""
    faults = ev.faults
    limit = f"{ev.timeout:g} s per experiment group" if ev.timeout else "in process"
    where = "; ".join(f.describe() for f in faults[:3]) + (f"; {len(faults) - 3} more" if len(faults) > 3 else "")
    return Finding("execution", "runs every experiment to its end (no crash, no hang)", "no crash, no hang",
                   "no crash, no hang", f"{len(faults)} crash(es)/time-out(s) ({limit})" if faults else f"all ran ({limit})",
                   not faults, where, "a controller step is a bounded, memory-safe function of the ISV", 0,
                   float(len(faults)))


def single_thread(ev: Evidence) -> Finding:
    """Only thread 0 of block 0 changes the ISV, whatever grid the kernel is launched on."""
    doc = "kernel: single-thread kernel (only threadIdx.x == 0 of blockIdx.x == 0 acts)"
    probe = ev.threads
    if probe is None:
        return Finding("single_thread", "only thread 0 of block 0 changes the ISV", "thread (0, 0) only",
                       "thread (0, 0) only", "not measured (the probe did not finish)", False,
                       "see the execution row", doc)
    others = [(regime, probe.coords[i]) for regime, row in probe.changed.items() for i, c in enumerate(row)
              if c and probe.coords[i] != (0, 0)]
    dims = f"blockDim {probe.dims[0]}, gridDim {probe.dims[3]}"
    where = "; ".join(f"KL {r}: threadIdx.x {t}, blockIdx.x {b} changed the ISV" for r, (t, b) in others[:3])
    n = len(probe.coords) - 1
    acting = n - len({c for _, c in others})
    return Finding("single_thread", f"only thread 0 of block 0 changes the ISV ({dims})", "thread (0, 0) only",
                   "thread (0, 0) only", f"{acting}/{n} other threads left the ISV unchanged", not others, where,
                   doc, 0, float(len(others)))


def no_atomics(ev: Evidence) -> Finding:
    st = ev.static
    return Finding("no_atomics", "no atomic instructions in the PTX (atom./red.)", "none", "none",
                   ", ".join(st.atomics) if st.atomics else f"none (NVRTC {st.nvrtc}, {st.arch})", not st.atomics,
                   "" if not st.atomics else f"PTX has {', '.join(st.atomics)}",
                   "kernel: Per `feedback_no_atomicadd`: single-thread kernel, no atomics.", 0, float(len(st.atomics)))


def resources(ev: Evidence) -> Finding:
    """Informational: the candidate's GPU resources as ptxas reports them (not gated)."""
    st = ev.static
    regs = f"{st.registers} registers" if st.registers is not None else "registers not reported"
    spill = f"{st.spill_bytes} B spills" if st.spill_bytes is not None else "spills not reported"
    return Finding("resources", f"GPU resources ({st.arch}, reported, not gated)", "reported", "reported",
                   f"{st.global_stores} st.global, {st.local_accesses} local-memory accesses, {spill}, "
                   f"{st.stack_bytes or 0} B stack, {regs}", True, "", "informational", 0,
                   float(st.registers) if st.registers is not None else None)


def coverage(ev: Evidence, required: bool = False) -> Finding:
    """Lines and branches of the candidate the experiments executed (a failure only when required)."""
    cov = ev.coverage
    ok = cov.complete and not cov.faults or not required
    where = "" if cov.complete else cov.summary().split("; ", 1)[1]
    return Finding("coverage", "every line and branch of the candidate ran (gcov)" + ("" if required else ", reported"),
                   "all" if required else "reported", "all", cov.summary(), ok, where,
                   "--require-coverage" if required else "informational", 0,
                   float(cov.lines_hit + cov.branches_hit))


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


def _describe_vanishing(v: dict) -> str:
    parts = [f"subnormal from step {v['first_subnormal']}" if v["first_subnormal"] else "never subnormal",
             f"0 from step {v['first_zero']}" if v["first_zero"] else f"settles at {_g(v['settled'])}",
             f"back to λ0 {v['recovered']} steps into high KL" if v["recovered"] else
             f"never back under high KL (ends at {_g(v['final'])})"]
    return "; ".join(parts)


def vanishing(ev: Evidence) -> Finding:
    """A rule with no floor: does aligned KL drive λ to a subnormal or to 0 (where the λ ≤ 0 guard freezes
    it), and does high KL bring it back? Judged against the spec model's prediction, bit for bit."""
    doc = ev.controller["floor"]
    r = ev.vanishing[0]
    sc = r.scenario
    n = int(sc.params["aligned_steps"])
    expected = _spec_vanishing(spec.Rule.of(ev.controller), sc.lambda0, n, sc.kl[0], sc.kl[-1], sc.target[0])
    got, want = vanishing_summary(r), vanishing_summary(Run(r.scenario, expected, []))
    ok = same(r.lam, expected)
    where = ""
    if not ok:
        step = first_step(bits(r.lam) != bits(expected))
        where = f"vanishing, step {step}: kernel {_g(r.lam[step - 1])}, spec {_g(expected[step - 1])}"
    value = got["first_zero"] or got["first_subnormal"]
    return Finding("vanishing", "no floor: λ under aligned KL, then high KL (subnormal, 0, recovery)",
                   "no floor", _describe_vanishing(want), _describe_vanishing(got), ok, where, doc.doc, doc.line,
                   None if value is None else float(value))


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


#: Experiment groups (repro.campaign.GROUPS) each check reads; the others read the catalogue.
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
    return Finding(key, key, "", "", f"not measured: {', '.join(missing)} did not finish", False,
                   "see the execution row")


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
