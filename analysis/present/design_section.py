"""The report's section on cold starts and the design measures (issue 35): two tables and two figures, from
what :mod:`analysis.judge.design_measures` computed; nothing is measured here.

Every controller in the comparison is a row or a line, in the order handed in (the contract's entries: the
fixed and original controllers, then every peer), so an entry added to the contract appears here unasked.
"""

from __future__ import annotations

import numpy as np

from analysis.judge.design_measures import RISE_FROM, RISE_TO, SETTLE_BAND, WARM_UP_SCENARIO, Cycle, Design, StepResponse
from analysis.present.peers_plots import COLORS
from analysis.present.plots import plt, tight

FIGURES = {
    "fig15_warm_up.png": "Cold start: the share of λ each controller keeps once a KL EMA warming up from 0 has come "
    "within 1 % of 1.1 × the target, against the EMA's rate (log scale); a ring marks the rate at or below which "
    "it keeps half or less (the fixed kernel's floor is half its seed λ: its line stops there).",
    "fig16_design_measures.png": "The design measures in pictures: λ after a step up in KL, under the square wave, "
    "under log-normal noise (σ = 1), and in the distillation toy, one line per controller.",
}

#: What each measure of the measures table means, in a line (the table's legend).
MEANINGS = {
    "rise": f"steps for ln λ to go from {RISE_FROM:.0%} to {RISE_TO:.0%} of its change after KL steps from the "
    "target to 100× it (catalogue `step_up`)",
    "overshoot": "how far ln λ goes past its final value after that step, as a share of the change (0: never)",
    "settle ↑ / ↓": f"steps after the step up (down, to target/100) until ln λ stays within {SETTLE_BAND:.0%} of "
    "its change around its final value; — where λ still moves at the run's end",
    "cycle □": "under the square wave (20 steps at 5× the target, 20 at 1/5): λ's max/min over the second half "
    "with its trend removed (×1: λ holds) and the period it repeats at (steps)",
    "cycle ~": "the same under log-normal KL noise around the target (σ = 1): a period only where λ repeats",
    "floor / ceiling": "share of the catalogue's steps (ordinary inputs) on which λ sits on its floor (ceiling); "
    "— where the rule has none",
    "warm-up loss": f"share of λ lost once a KL EMA warming from 0 at rate 0.01 has come within 1 % of 1.1 × the "
    f"target (`{WARM_UP_SCENARIO}`)",
    "half-loss rate": "the EMA rate at or below which a cold start costs at least half of λ (bisection over runs "
    "of the kernel); not monotone where a slower EMA keeps more than half while a faster one loses it (a PID's "
    "overshoot: no single rate says it)",
    "toy": "in the distillation toy (default parameters, seed 0, KL EMA from 0 at rate 0.01): lowest λ, share of "
    "steps on the floor / ceiling, and λ's cycle over the second half",
}


def _color(name: str, i: int) -> str:
    return COLORS.get(name) or plt.get_cmap("tab10")(i % 10)


#: A line style and marker per controller (by order): rules with the same numbers draw the same line, and the
#: styles keep each one visible where they coincide (TF-Agents, modular_rl and BatchPPO in a cold start).
_STYLES = [("-", "o"), ("--", "s"), ("-.", "^"), (":", "v"), ("-", "D"), ("--", "x"), ("-.", "+"), (":", "*"), ("-", "P"),
           ("--", "d")]


def _style(i: int) -> tuple[str, str]:
    return _STYLES[i % len(_STYLES)]


def _share(x) -> str:
    return "—" if x is None else f"{x:.1%}"


def _steps(x) -> str:
    return "—" if x is None else f"{x}"


def _recovery(w, steps_after: int) -> str:
    if w.recovery == 0:
        return "never fell"
    return f"not within {steps_after}" if w.recovery is None else str(w.recovery)


def warm_up_table(rows: list) -> list[str]:
    """The cold-start table: a row per controller and scenario (``analysis.judge.design_measures.warm_ups``)."""
    out = ["| controller | scenario | λ before | λ after the warm-up | lowest λ (step) | steps at the floor "
           "| steps to recover |", "|---|---|---|---|---|---|---|"]
    for name, scenario, _, w in rows:
        out.append(f"| {name} | {scenario} | {w.before:.4g} | {w.after:.4g} ({1 - w.loss:.1%} kept) | "
                   f"{w.lowest:.4g} ({w.lowest_step}) | {_steps(w.at_floor)} | {_recovery(w, w.steps)} |")
    return out


def _cycle(c: Cycle) -> str:
    if c.amplitude is None:
        return "— (λ reaches 0 or ∞)"
    return f"×{c.amplitude:.3g}" + (f", {c.period}" if c.period is not None else "")


def _response(s: StepResponse, what: str) -> str:
    value = getattr(s, what)
    if what == "overshoot":
        return "—" if value is None else f"{value:.0%}"
    return "—" if value is None else str(value)


def measures_table(designs: dict[str, Design]) -> list[str]:
    """The measures table: a row per controller; the lines after it say what each column means."""
    out = ["| controller | rise | overshoot | settle ↑ | settle ↓ | cycle □ | cycle ~ | floor | ceiling | "
           "warm-up loss | half-loss rate | toy: lowest λ | toy: floor / ceiling | toy: cycle |",
           "|---|" + "---|" * 13]
    for name, d in designs.items():
        h = d.half_rate
        half = ("not monotone" if not h.monotone else f"{h.rate:.3g}" if h.rate is not None and h.above is not None
                else f"≥ {h.rate:g}" if h.rate is not None else f"< {h.above:g}")
        out.append(f"| {name} | {_response(d.step_up, 'rise')} | {_response(d.step_up, 'overshoot')} | "
                   f"{_response(d.step_up, 'settling')} | {_response(d.step_down, 'settling')} | {_cycle(d.square)} | "
                   f"{_cycle(d.noise)} | {_share(d.at_floor)} | {_share(d.at_ceiling)} | {d.warm_up.loss:.1%} | {half} | "
                   f"{d.toy_lowest:.3g} | {_share(d.toy_at_floor)} / {_share(d.toy_at_ceiling)} | {_cycle(d.toy_cycle)} |")
    out += ["", *(f"- **{k}**: {v}." for k, v in MEANINGS.items())]
    return out


def markdown(warm: list, designs: dict[str, Design], rates_note: str) -> list[str]:
    """The section: the cold-start table, then the measures table with what each measure means."""
    return ["## Cold start and resume (issue 35)", "",
            "The KL EMA (slot 488) restarting from 0 — at step 0, or after a checkpoint that did not save it — "
            "sits below every band for its first steps, and each controller decays λ there. Scenarios of the "
            "catalogue: `warm_up_a{rate}` (the EMA warming from 0 toward 1.1 × the target, from the seed λ), "
            "`resume_ema_reset` (settled, then the EMA restarts from 0 while λ is kept) and "
            "`resume_lambda_reset` (λ restarts from its seed while the EMA is kept at 1.1 × the target). λ after "
            "the warm-up is read once the EMA has come within 1 % of its level (the run's end where the EMA was "
            "kept); steps to recover count from the first lowest λ until λ is back at λ before. "
            + rates_note, "", *warm_up_table(warm), "",
            "## The measures a team compares designs by", "",
            "Over the catalogue (the KL trace is given: open loop) and in the toy (the KL answers λ: closed loop). "
            "Steps are controller launches.", "", *measures_table(designs), "",
            "Data: `data/warm_up.csv` (the cold-start table), `data/warm_up_sweep.csv` (figure 15's curves and "
            "each controller's half-loss rate), `data/design_measures.csv` (the measures table).", ""]


def warm_up_figure(curves: dict[str, tuple[list[float], list[float]]], half: dict):
    """Share of λ kept after the warm-up against the EMA rate, a line per controller; the half-loss rate dotted."""
    top = 1.08  # a share of λ kept; a rule that ends above its start (a PID's overshoot) is marked at the top
    fig, ax = plt.subplots(figsize=(10.5, 4.8))
    for i, (name, (rates, kept)) in enumerate(curves.items()):
        color, (ls, marker) = _color(name, i), _style(i)
        ax.plot(rates, kept, ls=ls, marker=marker, ms=5, mfc="none", color=color, lw=1.5, label=name)
        h = half.get(name)
        if h is not None and h.rate is not None and h.above is not None:
            ax.plot([h.rate], [0.5], "o", ms=7, mfc="white", mec=color, mew=2)
        peak = int(np.argmax(kept))
        if kept[peak] > top:
            ax.annotate(f"{name}: up to {kept[peak]:.3g}× at {rates[peak]:.2g} (off the axis)", (rates[peak], top),
                        xytext=(8, -14), textcoords="offset points", fontsize=7, color=color,
                        arrowprops={"arrowstyle": "->", "color": color})
    ax.axhline(0.5, color="k", ls=":", lw=0.8)
    ax.annotate("half of λ", (min(min(r) for r, _ in curves.values()), 0.5), xytext=(2, 3), textcoords="offset points",
                fontsize=7)
    ax.set(xscale="log", ylim=(-0.03, top), xlabel="rate of the KL EMA (per step; log scale: 0.001 ≈ a 1000-step horizon)",
           ylabel="share of λ kept after the warm-up (λ after ÷ λ before)",
           title="Cold start: the KL EMA warming up from 0 toward 1.1 × the target")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    return tight(fig)


def measures_figure(panels: dict[str, dict[str, tuple[np.ndarray, np.ndarray]]]):
    """Four panels, each a dict controller → (steps, λ ÷ λ before): the step up, the square wave, the noise, the toy."""
    titles = {"step": "After KL steps up to 100 × the target", "square": "Square wave: 20 steps at 5×, 20 at 1/5 the target",
              "noise": "Log-normal KL noise around the target (σ = 1)", "toy": "In the distillation toy (closed loop)"}
    xlabels = {"step": "steps after the step", "square": "step", "noise": "step", "toy": "training step"}
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    for ax, (key, lines) in zip(axes.flat, panels.items(), strict=True):
        for i, (name, (x, y)) in enumerate(lines.items()):
            y = np.asarray(y, dtype=np.float64)
            ok = np.isfinite(y) & (y > 0)
            ax.plot(np.asarray(x)[ok], y[ok], color=_color(name, i), ls=_style(i)[0], lw=1.2, label=name)
        ax.set(yscale="log", title=titles[key], xlabel=xlabels[key],
               ylabel="λ ÷ λ at the start (log)" if key != "toy" else "λ (log)")
    axes.flat[0].legend(loc="upper left", ncol=2, fontsize=7)
    fig.suptitle("How each controller's λ moves: step response, limit cycles, closed loop")
    return tight(fig)


def data(section) -> dict:
    """The section's tables for ``data/`` (file name → DataFrame); empty where the report has no section."""
    import pandas as pd

    if section is None:
        return {}
    warm = pd.DataFrame([{"controller": n, "scenario": s, "alpha": p.get("alpha"), "level": p.get("level"),
                          "lambda_before": w.before, "lambda_after": w.after, "lowest": w.lowest,
                          "lowest_step": w.lowest_step, "steps_at_floor": w.at_floor, "recovery_steps": w.recovery,
                          "steps": w.steps} for n, s, p, w in section.warm_ups])
    sweep = pd.DataFrame([{"controller": n, "alpha": a, "kept": k, "half_loss_rate": section.half[n].rate}
                          for n, (rates, kept) in section.curves.items() for a, k in zip(rates, kept, strict=True)])
    rows = []
    for n, d in section.designs.items():
        rows.append({"controller": n, "rise_steps": d.step_up.rise, "overshoot": d.step_up.overshoot,
                     "settling_up_steps": d.step_up.settling, "settling_down_steps": d.step_down.settling,
                     "square_amplitude": d.square.amplitude, "square_period": d.square.period,
                     "noise_amplitude": d.noise.amplitude, "noise_period": d.noise.period,
                     "share_at_floor": d.at_floor, "share_at_ceiling": d.at_ceiling, "warm_up_loss": d.warm_up.loss,
                     "half_loss_rate": d.half_rate.rate, "toy_lowest": d.toy_lowest, "toy_share_at_floor": d.toy_at_floor,
                     "toy_share_at_ceiling": d.toy_at_ceiling, "toy_amplitude": d.toy_cycle.amplitude,
                     "toy_period": d.toy_cycle.period})
    return {"warm_up.csv": warm, "warm_up_sweep.csv": sweep, "design_measures.csv": pd.DataFrame(rows)}


def rates_note(section) -> str:
    """The half-loss rates in words, read from the section."""
    per_controller = []
    for n, h in section.half.items():
        if h.rate is not None and h.above is not None:
            per_controller.append(f"{n} {h.rate:.3g}")
        else:
            per_controller.append(f"{n}: {h.why}")
    return "The EMA rate at or below which a cold start toward 1.1 × the target costs half of λ or more " \
           "(bisection over kernel runs, figure below): " + "; ".join(per_controller) + "."
