"""The report's comparison with the published adaptive-KL rules (the peers), formatted.

Pure functions of :class:`analysis.judge.peer_measures.PeerMeasures` (fixed, original and each peer, each
measured against its own contract) and, optionally, the closed-loop toy's fractions: no kernel runs and
nothing is measured here. The contract supplies only labels (which bounds a rule declares) and the sources'
quotations.
"""

from __future__ import annotations

import pandas as pd

from analysis.judge.peer_measures import NOISE_SIGMAS, PeerMeasures
from analysis.judge.reading import significant
from analysis.present import render


def _peers(measures: dict[str, PeerMeasures]) -> list[str]:
    """The published rules among ``measures`` (contract entries with a ``source``)."""
    return [n for n, m in measures.items() if m.controller.source]


def _declared(m: PeerMeasures, key: str) -> str:
    bound = m.controller.bound(key)
    return "none" if bound is None else significant(bound, 4)


def _dead_zone_cell(m: PeerMeasures) -> str:
    """The KL band that holds λ, as measured by the onset bisection (× target), median over probe targets."""
    if m.band is None:
        return "no onset found: " + ", ".join(m.no_onset) + " never happens"
    lo, up = m.band
    return f"[{lo:.6g}, {up:.6g}]·target (×{m.band_width:.4g} wide)"


def _to_bottom_cell(m: PeerMeasures) -> str:
    """Steps of aligned KL (target/100) from the seed λ to where λ stops: the floor, 0, or a stuck subnormal."""
    if m.unfloored:
        sub = f"subnormal from {m.first_subnormal}, " if m.first_subnormal else ""
        if m.first_zero:
            held = "frozen by the λ ≤ 0 guard" if m.controller.guarded else "0·factor stays 0"
            return f"{sub}0 at step {m.first_zero} ({held})"
        return f"{sub}stuck at {significant(m.stuck_at, 4)} from step {m.stuck_from} (never 0)"
    return f"floor at step {m.floor_step}" if m.floor_step else f"not reached in {m.aligned_steps} steps"


def _recovery_cell(m: PeerMeasures) -> str:
    """Steps of high KL (100·target) that bring λ from where aligned KL left it back to the seed λ."""
    if m.unfloored:
        return f"{m.recovery} steps" if m.recovery else f"never (stays {significant(m.final, 4)})"
    return f"{m.recovery} steps (from the floor)" if m.recovery else f"not within {m.recovery_window} steps"


def _bad_input_cell(m: PeerMeasures) -> str:
    """What one step does to λ for the non-finite cases (how many leave λ NaN, how many change it), and what
    KL = 0 does (the first guard case: unchanged under the suite's guard, the rule's own step in a peer)."""
    zero = "" if m.at_zero_kl is None else f"; KL = 0: {m.at_zero_kl}"
    return (f"{m.nonfinite_nan}/{m.nonfinite_cases} non-finite cases leave λ NaN, {m.nonfinite_moved} change it{zero}; "
            f"guards {render.measured(m.guards)}")


def table(measures: dict[str, PeerMeasures], toy: dict[str, tuple[float, float] | None] | None = None) -> pd.DataFrame:
    """One row per controller (fixed, original, each peer present): every cell measured.

    ``toy``: optional closed-loop (collapsed, diverged) fractions per controller
    (:func:`analysis.judge.peer_measures.toy_outcomes`).
    """
    rows = []
    for name, m in measures.items():  # in the caller's order: fixed, original, then the peers
        row = {
            "controller": name,
            "own contract": "FAIL " + ", ".join(m.failed) if m.failed else "pass",
            "steps to double": "never" if m.steps_to_double is None else m.steps_to_double,
            "steps to halve": "never" if m.steps_to_halve is None else m.steps_to_halve,
            "floor": f"{_declared(m, 'floor')} (lowest λ {significant(m.lowest, 4)})",
            "ceiling": f"{_declared(m, 'ceiling')} (highest λ {significant(m.highest, 4)} in {m.high_steps} steps of high KL)",
            "dead zone (measured onsets)": _dead_zone_cell(m),
            "aligned KL: steps to the bottom": _to_bottom_cell(m),
            "λ held under noise σ=" + "/".join(f"{s:g}" for s in NOISE_SIGMAS):
                " / ".join(f"{held:.0%}" for held in m.held_under_noise),
            "recovery to seed λ": _recovery_cell(m),
            "bad input": _bad_input_cell(m),
        }
        if toy is not None:
            got = toy.get(name)
            row["toy: collapsed / diverged"] = "—" if got is None else f"{got[0]:.1%} / {got[1]:.1%}"
        rows.append(row)
    return pd.DataFrame(rows)


def aligned_traces(measures: dict[str, PeerMeasures]) -> pd.DataFrame:
    """λ under sustained aligned KL per controller (:attr:`PeerMeasures.aligned`): controller, step, lambda."""
    return pd.concat([pd.DataFrame({"controller": name, "step": range(m.aligned.size), "lambda": m.aligned})
                      for name, m in measures.items()], ignore_index=True)


def markdown(measures: dict[str, PeerMeasures], tab: pd.DataFrame) -> list[str]:
    """The section's lines: sources, the table, and what the measurements say about floors."""
    lines = ["## Peer controllers: the published adaptive-KL rules through the same suite", "",
             "Each rule is a one-thread kernel under `kernels/peers/` with the same ISV interface, judged against "
             "its own contract entry: the rule as the named release ships it, every value quoted from it, each "
             "threshold computed and compared in the release's own arithmetic (float32, or double, or a double "
             "threshold rounded once to float32), and KL ≤ 0, a negative KL or target and λ ≤ 0 handled as the "
             "release handles them. The suite's guard (KL, target or λ ≤ 0 leave λ alone) belongs to the fixed and "
             "original controllers; a peer has it only where its release does ("
             + (", ".join(n for n in _peers(measures) if measures[n].controller.guarded) or "none does")
             + "). The ISV slot is float32, so a coefficient that the source keeps in double is rounded to float32 "
             "after each update. Each row is this release:", ""]
    lines += [f"- **{name}**: {measures[name].controller.release_text()}" for name in _peers(measures)]
    cols = list(tab.columns)
    lines += ["", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in tab.itertuples(index=False):
        cells = [f"**{row[0]}**", *map(render.md_cell, row[1:])]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Steps to double and halve: from the seed λ under KL = 100·target and target/100. Dead zone: the "
              "least KL that raises λ and the greatest that lowers it (bisection over float32), over the target. "
              "Recovery: steps of KL = 100·target from where sustained aligned KL left λ back to the seed λ. "
              "Toy: the closed-loop distillation toy (`repro/toy/`) over its robustness grid × seeds, each "
              "controller from its own seed λ; collapsed = q_pi_agree fell below the toy's threshold, diverged = λ "
              "overflowed to +inf or the toy's state turned NaN. The toy's scales (KL target 1 nat, critical λ ≈ 0.1) "
              "were tuned for the in-repo controller.", ""]
    unfloored = [n for n in _peers(measures) if measures[n].unfloored]
    zero = [n for n in unfloored if measures[n].first_zero]
    stuck = [n for n in unfloored if n not in zero]
    if zero:
        lines.append(f"- No floor, λ reaches exactly 0 under aligned KL: {', '.join(zero)}; every later step "
                     "multiplies 0 and no KL brings it back.")
    if stuck:
        lines.append(f"- No floor, λ sinks to a subnormal that float32 rounding holds still: {', '.join(stuck)}.")
    lines += ["", "Data: `data/peers.csv` (this table), `data/peers_aligned.csv` (λ under aligned KL per controller), "
              "`data/peers_closed_loop.csv` (the toy per grid point).", ""]
    return lines
