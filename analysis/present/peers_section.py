"""The report's comparison with the published adaptive-KL rules (the peers), from measurements only.

Pure functions of :class:`analysis.judge.verdict.Verdict` objects (fixed, original
and each peer judged against its own contract) and, optionally, the
closed-loop collapse fractions: no kernel runs here. Every cell of the table
is read from a run's λ trajectory or a gate finding; the contract supplies
only labels (which bounds a rule declares) and the sources' quotations.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.judge.properties import bits, classify, first_step, vanishing_summary
from analysis.judge.verdict import Verdict
from analysis.present import render
from repro.core import spec
from repro.core.f32 import F32

#: The peers, in the order the report lists them (contract names; kernels/peers/<name>.cu).
NOISE_SIGMAS = (0.25, 0.5, 1.0)


def _peers(verdicts: dict[str, Verdict]) -> list[str]:
    """The published rules among ``verdicts`` (contract entries with a ``source``)."""
    return [n for n, v in verdicts.items() if v.evidence.controller.source]


def _g(x) -> str:
    return f"{float(x):.4g}"


def _finding_value(v: Verdict, key: str):
    f = next((f for f in v.findings if f.key == key), None)
    return None if f is None or f.measured is None else f.measured


def _run(v: Verdict, name: str):
    return next((r for r in v.evidence.catalogue if r.scenario.name == name), None)


def _bound_cell(v: Verdict, key: str) -> str:
    """Declared bound and the extreme λ measured: lowest over aligned KL, highest over high KL."""
    ctrl = v.evidence.controller
    runs = [r for r in (_run(v, "aligned"), *v.evidence.vanishing)] if key == "floor" else [_run(v, "diverged")]
    lam = np.concatenate([r.lam for r in runs if r is not None])
    extreme = lam.min() if key == "floor" else lam.max()
    bound = ctrl.bound(key)
    declared = "none" if bound is None else _g(bound)
    if key == "floor":
        return f"{declared} (lowest λ {_g(extreme)})"
    return f"{declared} (highest λ {_g(extreme)} in {runs[0].scenario.steps} steps of high KL)"


def _dead_zone_cell(v: Verdict) -> str:
    """The KL band that holds λ, as measured by the onset bisection (× target), median over probe targets."""
    ev = v.evidence
    ratios = {k: ev.onsets[k].astype(np.float64) / ev.probe_targets for k in ("ramp", "decay")}
    if not all(np.isfinite(r).any() for r in ratios.values()):
        return "no onset found: " + ", ".join(k for k, r in ratios.items() if not np.isfinite(r).any()) + " never happens"
    up, lo = (float(np.nanmedian(ratios[k])) for k in ("ramp", "decay"))
    return f"[{lo:.6g}, {up:.6g}]·target (×{up / lo:.4g} wide)"


def _to_bottom_cell(v: Verdict) -> str:
    """Steps of aligned KL (target/100) from the seed λ to where λ stops: the floor, 0, or a stuck subnormal."""
    ctrl = v.evidence.controller
    if v.evidence.vanishing:
        s = vanishing_summary(v.evidence.vanishing[0])
        sub = f"subnormal from {s['first_subnormal']}, " if s["first_subnormal"] else ""
        if s["first_zero"]:
            held = "frozen by the λ ≤ 0 guard" if ctrl.guarded else "0·factor stays 0"
            return f"{sub}0 at step {s['first_zero']} ({held})"
        r = v.evidence.vanishing[0]
        n = int(r.scenario.params["aligned_steps"])
        stuck = first_step(bits(r.lam[:n]) == bits(s["settled"]))
        return f"{sub}stuck at {_g(s['settled'])} from step {stuck} (never 0)"
    r = _run(v, "aligned")
    floor = F32(ctrl.bound("floor"))
    step = first_step(bits(r.lam) == bits(floor))
    return f"floor at step {step}" if step else f"not reached in {r.scenario.steps} steps"


def _recovery_cell(v: Verdict) -> str:
    """Steps of high KL (100·target) that bring λ from where aligned KL left it back to the seed λ."""
    if v.evidence.vanishing:
        s = vanishing_summary(v.evidence.vanishing[0])
        return f"{s['recovered']} steps" if s["recovered"] else f"never (stays {_g(s['final'])})"
    r = _run(v, "ramp_from_floor")  # starts at the floor: where aligned KL leaves a floored rule
    seed = F32(v.evidence.controller.value("seed_lambda"))
    step = first_step(r.lam >= seed)
    return f"{step} steps (from the floor)" if step else f"not within {r.scenario.steps} steps"


def _noise_cell(v: Verdict) -> str:
    """Share of steps on which λ did not move under log-normal KL noise around the target, per σ."""
    cells = []
    for sigma in NOISE_SIGMAS:
        r = _run(v, f"lognormal_sigma{sigma}")
        prev = np.concatenate([[r.scenario.lambda0], r.lam[:-1]]).astype(F32)
        held = float(np.mean(bits(prev) == bits(r.lam)))
        cells.append(f"{held:.0%}")
    return " / ".join(cells)


def _bad_input_cell(v: Verdict) -> str:
    """What one step does to λ for the non-finite cases (how many leave λ NaN, how many change it), and what
    KL = 0 does (the first guard case: unchanged under the suite's guard, the rule's own step in a peer)."""
    rule = spec.Rule.of(v.evidence.controller)
    runs = v.evidence.nonfinite
    outcomes = [classify(r.scenario.lambda0, r.lam[0], rule) for r in runs]
    nan = sum(bool(np.isnan(r.lam[0])) for r in runs)
    moved = sum(o != "unchanged" for o in outcomes)
    guards = next(f for f in v.findings if f.key == "guards")
    at_zero = next((r for r in v.evidence.guards if r.scenario.name == "kl=0"), None)
    zero = "" if at_zero is None else f"; KL = 0: {classify(at_zero.scenario.lambda0, at_zero.lam[0], rule)}"
    return (f"{nan}/{len(runs)} non-finite cases leave λ NaN, {moved} change it{zero}; "
            f"guards {render.measured(guards)}")


def table(verdicts: dict[str, Verdict], collapse: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per controller (fixed, original, each peer present): every cell measured.

    ``collapse``: optional closed-loop frame with ``controller`` and ``collapse_fraction`` columns.
    """
    rows = []
    for name in verdicts:  # in the caller's order: fixed, original, then the peers
        v = verdicts[name]
        row = {
            "controller": name,
            "own contract": "pass" if v.ok else "FAIL " + ", ".join(f.key for f in v.failed),
            "steps to double": _finding_value(v, "steps_to_double"),
            "steps to halve": _finding_value(v, "steps_to_halve"),
            "floor": _bound_cell(v, "floor"),
            "ceiling": _bound_cell(v, "ceiling"),
            "dead zone (measured onsets)": _dead_zone_cell(v),
            "aligned KL: steps to the bottom": _to_bottom_cell(v),
            "λ held under noise σ=" + "/".join(f"{s:g}" for s in NOISE_SIGMAS): _noise_cell(v),
            "recovery to seed λ": _recovery_cell(v),
            "bad input": _bad_input_cell(v),
        }
        if collapse is not None:
            hit = collapse[collapse.controller == name]
            row["toy: collapsed / diverged"] = (f"{hit.collapse_fraction.mean():.1%} / {hit.diverged_fraction.mean():.1%}"
                                                if len(hit) else "—")
        rows.append(row)
    out = pd.DataFrame(rows)
    for col in ("steps to double", "steps to halve"):
        out[col] = out[col].map(lambda x: "never" if x is None or (isinstance(x, float) and np.isnan(x)) else int(x))
    return out


def aligned_traces(verdicts: dict[str, Verdict]) -> pd.DataFrame:
    """λ under sustained aligned KL (the catalogue's ``aligned`` run) per controller: controller, step, lambda.

    Step 0 holds the seed λ. Rules with no floor continue into their ``vanishing`` run's aligned stretch
    where it is longer (so that λ reaching 0 shows).
    """
    frames = []
    for name in verdicts:  # in the caller's order: fixed, original, then the peers
        ev = verdicts[name].evidence
        r = _run(verdicts[name], "aligned")
        lam = r.lam
        if ev.vanishing and int(ev.vanishing[0].scenario.params["aligned_steps"]) > lam.size:
            v = ev.vanishing[0]
            lam = v.lam[: int(v.scenario.params["aligned_steps"])]
        lam = np.concatenate([[r.scenario.lambda0], lam]).astype(F32)
        frames.append(pd.DataFrame({"controller": name, "step": np.arange(lam.size), "lambda": lam}))
    return pd.concat(frames, ignore_index=True)


def markdown(verdicts: dict[str, Verdict], tab: pd.DataFrame, figure: str | None = None) -> list[str]:
    """The section's lines: sources, the table, and what the measurements say about floors."""
    lines = ["## Peer controllers: the published adaptive-KL rules through the same suite", "",
             "Each rule is a one-thread kernel under `kernels/peers/` with the same ISV interface, judged against "
             "its own contract entry: the rule as the named release ships it, every value quoted from it, each "
             "threshold computed and compared in the release's own arithmetic (float32, or double, or a double "
             "threshold rounded once to float32), and KL ≤ 0, a negative KL or target and λ ≤ 0 handled as the "
             "release handles them. The suite's guard (KL, target or λ ≤ 0 leave λ alone) belongs to the fixed and "
             "original controllers; a peer has it only where its release does ("
             + (", ".join(n for n in _peers(verdicts) if verdicts[n].evidence.controller.guarded) or "none does")
             + "). The ISV slot is float32, so a coefficient that the source keeps in double is rounded to float32 "
             "after each update. Each row is this release:", ""]
    for name in _peers(verdicts):
        ctrl = verdicts[name].evidence.controller
        lines.append(f"- **{name}**: {ctrl.release_text()}")
    cols = list(tab.columns)
    lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in tab.itertuples(index=False):
        cells = [f"**{row[0]}**", *(str(c).replace("|", "\\|") for c in row[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Steps to double and halve: from the seed λ under KL = 100·target and target/100. Dead zone: the "
              "least KL that raises λ and the greatest that lowers it (bisection over float32), over the target. "
              "Recovery: steps of KL = 100·target from where sustained aligned KL left λ back to the seed λ. "
              "Toy: the closed-loop distillation toy (`repro/toy/`) over its robustness grid × seeds, each "
              "controller from its own seed λ; collapsed = q_pi_agree fell below the toy's threshold, diverged = λ "
              "overflowed to +inf or the toy's state turned NaN. The toy's scales (KL target 1 nat, critical λ ≈ 0.1) "
              "were tuned for the in-repo controller.", ""]
    unfloored = [n for n in _peers(verdicts) if verdicts[n].evidence.vanishing]
    zero = [n for n in unfloored if vanishing_summary(verdicts[n].evidence.vanishing[0])["first_zero"]]
    stuck = [n for n in unfloored if n not in zero]
    if zero:
        lines.append(f"- No floor, λ reaches exactly 0 under aligned KL: {', '.join(zero)}; every later step "
                     "multiplies 0 and no KL brings it back.")
    if stuck:
        lines.append(f"- No floor, λ sinks to a subnormal that float32 rounding holds still: {', '.join(stuck)}.")
    if figure:
        lines += ["", f"![λ under sustained aligned KL, every controller]({figure})", ""]
    lines += ["", "Data: `data/peers.csv` (this table), `data/peers_aligned.csv` (λ under aligned KL per controller), "
              "`data/peers_closed_loop.csv` (the toy per grid point).", ""]
    return lines
