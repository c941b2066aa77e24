"""The report's figures, drawn from measured data (tidy DataFrames and findings); no kernel runs here.

One colour per controller across every figure; λ axes are logarithmic where
λ spans decades; bounds, dead-zone bands and key steps are drawn and labelled.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from repro.core.ablation import FACTORS  # noqa: E402
from repro.core.contract import Controller  # noqa: E402
from repro.core.errors import SuiteError  # noqa: E402
from repro.toy import COLLAPSE  # noqa: E402

COLORS = {"original": "#d62728", "fixed": "#1f77b4"}
LABELS = {"original": "original (reconstructed)", "fixed": "fixed (96abc364b5)"}
OUTCOME_COLORS = {"unchanged": "#e8e8e8", "ramp": "#fdd0a2", "decay": "#c6dbef", "max": "#fd8d3c",
                  "min": "#6baed6"}
DPI = 150

plt.rcParams.update({"figure.dpi": DPI, "axes.grid": True, "grid.alpha": 0.3, "font.size": 9,
                     "axes.titlesize": 10, "legend.fontsize": 8})


def tight(fig):
    """``fig`` after ``tight_layout`` (a figure's last step before it is returned)."""
    fig.tight_layout()
    return fig


def _series(traj: pd.DataFrame, controller: str, scenario: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps from 0, λ with λ0 at step 0) of one run."""
    rows = traj[(traj.controller == controller) & (traj.scenario == scenario)].sort_values("step")
    return (np.concatenate([[0], rows.step.to_numpy()]),
            np.concatenate([[rows.lambda0.iloc[0]], rows["lambda"].to_numpy()]))


def collapse(traj, contracts: dict[str, Controller], floor_steps: dict[str, int | None]):
    """Figure 1: λ under sustained aligned KL from each seed λ (log λ).

    ``floor_steps``: the first step at which λ sits on the documented floor, None where it never does
    (a candidate whose floor differs); the x range then spans the whole scenario.
    """
    fig, ax = plt.subplots(figsize=(8, 4.5))
    reached = [s for s in floor_steps.values() if s is not None]
    xmax = max(reached) * 1.3 if len(reached) == len(floor_steps) else traj.step.max()
    for name in ("original", "fixed"):
        x, lam = _series(traj, name, "aligned")
        keep = x <= xmax
        ax.plot(x[keep], lam[keep], color=COLORS[name], lw=1.8, label=LABELS[name])
        floor = contracts[name].value("floor")
        ax.axhline(floor, color=COLORS[name], ls="--", lw=0.9, alpha=0.8)
        ax.annotate(f"documented floor {floor:g}", (xmax, floor), xytext=(0, 3), textcoords="offset points",
                    color=COLORS[name], fontsize=8, ha="right", va="bottom")
        s = floor_steps[name]
        if s is None:
            ax.annotate(f"never at the documented floor (λ {lam[-1]:.4g} after {x[-1]} steps)", (x[-1], lam[-1]),
                        xytext=(-4, 6), textcoords="offset points", ha="right", color=COLORS[name], fontsize=8)
            continue
        ax.plot([s], [lam[s]], "o", color=COLORS[name], ms=6)
        before = f" (λ = {lam[s - 1]:.5f} after {s - 1})" if name == "original" else ""
        # below the fixed line (its floor's label sits above it at the right edge), above the original's
        ax.annotate(f"at the floor from step {s}{before}", (s, lam[s]), xytext=(-14, -34) if name == "fixed" else (14, 40),
                    textcoords="offset points", color=COLORS[name], fontsize=8, ha="right" if name == "fixed" else "left",
                    arrowprops={"arrowstyle": "->", "color": COLORS[name], "lw": 0.8})
    lowest = min(_series(traj, name, "aligned")[1].min() for name in ("original", "fixed"))
    ax.set(yscale="log", xlim=(0, xmax), ylim=(min(5e-4, lowest / 2), 1.5),
           xlabel="training step (controller launches)",
           ylabel="λ (distillation strength, log)",
           title="The collapse: λ under sustained aligned KL (KL = target/100)")
    ax.legend(loc="upper right")
    return fig


def ramp_decay(traj, counts: dict[str, dict[str, int]]):
    """Figure 2: doubling under high KL (from the floor) and halving under low KL (from the ceiling)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2))
    for name in ("original", "fixed"):
        x, lam = _series(traj, name, "ramp_from_floor")
        keep = x <= 12
        # Both ramp ×1.2: the original is drawn wide underneath so that it stays visible.
        wide = name == "original"
        left.plot(x[keep], lam[keep] / lam[0], "-o", ms=6 if wide else 3, lw=4 if wide else 1.4, alpha=0.45 if wide
                  else 1, color=COLORS[name], label=LABELS[name])
        d = counts[name]["double"]
        left.plot([d], [lam[d] / lam[0]], "s", ms=9, mfc="none", mec=COLORS[name], mew=1.5)
        x, lam = _series(traj, name, "decay_from_ceiling")
        right.plot(x[1:], lam[1:] / lam[0], color=COLORS[name], lw=1.6, label=LABELS[name])
        h = counts[name]["halve"]
        right.plot([h], [lam[h] / lam[0]], "s", ms=9, mfc="none", mec=COLORS[name], mew=1.5)
        # the fixed one's marker sits near the right edge: its label goes left of it, inside the axes
        right.annotate(f"halved at step {h}", (h, lam[h] / lam[0]), xytext=(-10, -16) if name == "fixed" else (8, 10),
                       textcoords="offset points", color=COLORS[name], fontsize=8, ha="right" if name == "fixed" else "left")
    left.axhline(2, color="k", lw=0.8, ls=":")
    left.annotate(f"×2 at step {counts['fixed']['double']} (both)", (counts["fixed"]["double"], 2),
                  xytext=(10, -18), textcoords="offset points", fontsize=8)
    left.set_yscale("log", base=2)
    left.yaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%g"))
    left.set(xlabel="step under KL = 100·target", ylabel="λ / λ0 (log₂)",
             title="Ramp: doubling from the floor (same rate in both)")
    right.axhline(0.5, color="k", lw=0.8, ls=":")
    right.set(xscale="log", yscale="log", xlabel="step under KL = target/100 (log)", ylabel="λ / λ0 (log)",
              title="Decay: halving from the ceiling", ylim=(5e-4, 1.5))
    left.legend(loc="upper left")
    right.legend(loc="lower left")
    return tight(fig)


def dead_zone(traj, contracts: dict[str, Controller]):
    """Figure 3: KL drifting through the band (both bands shaded) and λ of both controllers below it."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, gridspec_kw={"height_ratios": [1, 1.2]})
    rows = traj[(traj.controller == "fixed") & (traj.scenario == "drift")].sort_values("step")
    top.plot(rows.step, rows.kl / rows.kl_target, color="k", lw=1.2, label="KL / target")
    for name in ("original", "fixed"):
        tol = contracts[name].value("tolerance")
        top.axhspan(1 / tol, tol, color=COLORS[name], alpha=0.15, label=f"{name} dead zone ×/÷{tol:g}")
        x, lam = _series(traj, name, "drift")
        bottom.plot(x, lam, color=COLORS[name], lw=1.6, label=LABELS[name])
        inside = (rows.kl / rows.kl_target).between(1 / tol, tol).to_numpy()
        steps = rows.step.to_numpy()[inside]
        bottom.axvspan(steps.min(), steps.max(), color=COLORS[name], alpha=0.08)
    top.set(yscale="log", ylabel="KL / target (log)", title="The dead zone: KL drifting from target/10 to 10·target")
    top.legend(loc="upper left", ncol=3)
    bottom.set(yscale="log", xlabel="training step", ylabel="λ (log)")
    bottom.legend(loc="upper left")
    return tight(fig)


def noise_tolerance(noise: dict[str, pd.DataFrame], contracts: dict[str, Controller],
                    predicted: tuple[np.ndarray, dict[str, list[float]]]):
    """Figure 4: fraction of steps on which λ changes under log-normal KL noise, measured and ``predicted``
    (σ grid, per controller the closed form's fraction on it: ``analysis.judge.report_measures.noise_curves``)."""
    fig, ax = plt.subplots(figsize=(7, 4.3))
    grid, curves = predicted
    for name in ("original", "fixed"):
        tol = contracts[name].value("tolerance")
        ax.plot(grid, curves[name], color=COLORS[name], lw=1.2, label=f"predicted 1 − erf(ln {tol:g} / (σ√2))")
        d = noise[name]
        ax.plot(d.sigma, d.changed_fraction, "o", color=COLORS[name], ms=5,
                label=f"measured, {name} (tolerance {tol:g}, {int(d.samples.iloc[0]):,} steps per σ)")
    ax.set(xlabel="σ of ln(KL / target)", ylabel="fraction of steps on which λ changes", ylim=(-0.02, 1),
           title="Noise tolerance: how often natural KL noise moves λ")
    ax.legend(loc="upper left")
    return fig


def oscillation_recovery(traj, recovery: dict[str, pd.DataFrame]):
    """Figure 5: square-wave KL (λ sawtooth) and steps to recover the seed λ after an aligned stretch."""
    fig = plt.figure(figsize=(11, 4.6))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 3])
    kl_ax = fig.add_subplot(grid[0, 0])
    left = fig.add_subplot(grid[1, 0], sharex=kl_ax)
    right = fig.add_subplot(grid[:, 1])
    for name in ("original", "fixed"):
        x, lam = _series(traj, name, "square_wave")
        left.plot(x, lam, color=COLORS[name], lw=1.2, label=LABELS[name])
        d = recovery[name]
        right.plot(d.stretch, d.recovery_steps, "-o", color=COLORS[name], ms=5, label=LABELS[name])
    rows = traj[(traj.controller == "fixed") & (traj.scenario == "square_wave")]
    kl_ax.step(rows.step, rows.kl / rows.kl_target, where="post", color="k", lw=0.9)
    kl_ax.set(yscale="log", ylabel="KL / target",
              title="Square-wave KL: 20 steps at 5×, 20 at 1/5× the target")
    kl_ax.tick_params(labelbottom=False)
    kl_ax.set_yticks([0.2, 1, 5], ["1/5", "1", "5"])
    kl_ax.minorticks_off()
    # room below the sawtooth's minima for the legend
    left.set(yscale="log", xlabel="training step", ylabel="λ (log)", ylim=(0.006, 1.5))
    left.legend(loc="lower right", framealpha=0.95, ncol=2)
    right.set(xscale="log", xlabel="length of the aligned stretch (steps, log)",
              ylabel="steps of high KL to regain the seed λ", title="Recovery after an aligned stretch")
    right.legend(loc="upper left")
    return tight(fig)


def scenario_grid(traj, scenarios: list[str], titles: dict[str, str] | None = None):
    """Figure 6: small multiples of every catalogue scenario: λ of both controllers (log) above the KL that
    drives it, as a multiple of the target (log, shared steps). ``titles``: scenario → its panel's title."""
    cols = 4
    rows_n = -(-len(scenarios) // cols)
    height = 3.3 * rows_n
    fig = plt.figure(figsize=(12, height))
    # a pair (λ over KL) close together, the scenarios apart: two levels of spacing, so not tight_layout
    cells = fig.add_gridspec(rows_n, cols, hspace=0.32, wspace=0.3, left=0.07, right=0.99, bottom=0.45 / height,
                             top=1 - 0.75 / height)
    first = None
    for i, scenario in enumerate(scenarios):
        row, col = divmod(i, cols)
        pair = cells[row, col].subgridspec(2, 1, height_ratios=[2, 1], hspace=0.06)
        lam_ax = fig.add_subplot(pair[0])
        kl_ax = fig.add_subplot(pair[1], sharex=lam_ax)
        first = first or lam_ax
        ratios = {}
        for name in ("original", "fixed"):
            x, lam = _series(traj, name, scenario)
            lam_ax.plot(x, lam, color=COLORS[name], lw=1.1, label=LABELS[name])
            rows = traj[(traj.controller == name) & (traj.scenario == scenario)].sort_values("step")
            ratios[name] = (rows.step.to_numpy(), (rows.kl / rows.kl_target).to_numpy())
        (xa, a), (xb, b) = ratios.values()
        same = np.array_equal(xa, xb) and np.array_equal(a, b)
        for name, (x, ratio) in ratios.items():  # one black line where both controllers saw the same KL
            if not (same and name == "fixed"):
                kl_ax.plot(x, ratio, color="k" if same else COLORS[name], lw=0.9)
        lam_ax.set(yscale="log", ylim=(5e-4, 1.5))
        lam_ax.set_title(titles.get(scenario, scenario) if titles else scenario, fontsize=9)
        lam_ax.tick_params(labelsize=7, labelbottom=False)
        kl_ax.axhline(1.0, color="k", ls=":", lw=0.7)
        kl_ax.set(yscale="log", ylim=(5e-3, 200))
        kl_ax.set_yticks([1e-2, 1, 1e2], ["1/100", "1", "100"])
        kl_ax.minorticks_off()
        kl_ax.tick_params(labelsize=7)
        if col == 0:
            lam_ax.set_ylabel("λ (log)")
            kl_ax.set_ylabel("KL / target")
        if i + cols >= len(scenarios):  # the lowest panel of its column
            kl_ax.set_xlabel("step")
    fig.legend(*first.get_legend_handles_labels(), loc="lower center", ncol=2, bbox_to_anchor=(0.5, 1 - 0.42 / height))
    fig.suptitle("Every catalogue scenario, both controllers: λ (above) and the KL input that drives it (below)",
                 y=1 + 0.05 / height, va="bottom")
    return fig


def bad_input(outcomes: pd.DataFrame):
    """Figure 7: what one step does to λ for each unusual value, per slot and KL regime, per controller; the KL
    and target values from each starting λ (the floor, just above it, the seed, mid-band, the ceiling)."""
    order = ("floor", "above floor", "seed", "mid-band", "ceiling")
    outcomes = outcomes.assign(rank=[order.index(s) if s in order else len(order) for s in outcomes.start])
    outcomes = outcomes.sort_values("rank", kind="stable")
    keys = list(dict.fromkeys(zip(outcomes.column, outcomes.start, strict=True)))
    keys.sort(key=lambda k: (0 if k[0] == "KL" else 1 if k[0] == "target" else 2))  # stable: starts in order
    values = list(dict.fromkeys(outcomes.value))
    fig, axes = plt.subplots(2, 1, figsize=(max(8.0, 0.95 * len(keys) + 2), 9.5))
    for ax, name in zip(axes, ("original", "fixed"), strict=True):
        d = outcomes[outcomes.controller == name]
        ax.set(xlim=(0, len(keys)), ylim=(len(values), 0))
        for _, r in d.iterrows():
            i, j = values.index(r.value), keys.index((r.column, r.start))
            ax.add_patch(plt.Rectangle((j, i), 1, 1, color=OUTCOME_COLORS.get(r.outcome, "#fb6a4a"), ec="white"))
            ax.text(j + 0.5, i + 0.5, r.outcome, ha="center", va="center", fontsize=7)
        lambda0 = {(c, s): v for c, s, v in zip(d.column, d.start, d.lambda0, strict=True)}
        labels = [column if column.startswith("λ") else
                  f"{column}\nλ0 {np.format_float_positional(np.float32(lambda0.get((column, start), np.nan)), unique=True)}"
                  f"\n({start})" for column, start in keys]
        ax.set_xticks(np.arange(len(keys)) + 0.5, labels, fontsize=7)
        ax.set_yticks(np.arange(len(values)) + 0.5, values, fontsize=8)
        ax.tick_params(length=0)
        ax.grid(False)
        ax.set_title(LABELS[name], color=COLORS[name])
        ax.set_ylabel("the unusual value")
    fig.suptitle("Bad input: what one step does to λ, from several starting λ (other inputs valid: target, KL in the "
                 "named regime)")
    return tight(fig)


def save(fig, path) -> None:
    """Write ``fig`` as PNG and close it; an OS error (a full disk) becomes one line."""
    try:
        fig.savefig(path, dpi=DPI, bbox_inches="tight")
    except OSError as err:
        raise SuiteError(f"cannot write {path}: {err.strerror or err}") from None
    finally:
        plt.close(fig)


def closed_loop(results: dict[str, dict]):
    """λ and q_pi_agree over steps in the closed-loop toy, per controller (log axes)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for name, r in results.items():
        tr = r["trace"]
        steps = np.arange(1, len(tr["lambda"]) + 1)
        color = COLORS.get(name, "k")
        top.plot(steps, tr["lambda"], color=color, lw=1.4, label=LABELS.get(name, name))
        bottom.plot(steps, np.maximum(np.asarray(tr["q_pi_agree"]), 1e-300), color=color, lw=1.4,
                    label=f"{name}: min 10^{r['log10_q_pi_agree_min']:.1f}")
    top.set(yscale="log", ylabel="λ (log)", title="Closed loop: the controller kernel drives a Q→π distillation toy")
    top.legend(loc="lower right")
    bottom.axhline(COLLAPSE, color="k", ls=":", lw=0.8)
    bottom.annotate(f"collapse threshold {COLLAPSE:g}", (len(tr["lambda"]), COLLAPSE), xytext=(-4, 3), textcoords="offset points",
                    ha="right", fontsize=8)
    bottom.set(yscale="log", xscale="log", xlabel="training step (log)", ylabel="q_pi_agree = π(argmax Q) (log)")
    bottom.legend(loc="lower right")
    return tight(fig)


def ablation(table: pd.DataFrame):
    """Collapse fraction of each of the 16 combinations of the fixes (bars, a fraction in [0, 1]), ordered as run,
    coloured by how many of the four changes the variant has (the key below the axis)."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    y = np.arange(len(table))
    parts = table[list(FACTORS)]  # the fix's parts each variant has (None: a whole kernel, the candidate)
    none, every, whole = parts.eq(False).all(axis=1), parts.eq(True).all(axis=1), parts.isna().all(axis=1)
    kinds = [("none of the four changes (the original)", none, COLORS["original"]),
             ("some of them", ~(none | every | whole), "#7f7f7f"),
             ("all four (the fix)", every, COLORS["fixed"]), ("a candidate kernel", whole, "#9467bd")]
    colors = np.empty(len(table), dtype=object)
    for _, mask, color in kinds:
        colors[mask.to_numpy()] = color
    ax.barh(y, table.collapse_fraction, color=colors)
    for i, r in enumerate(table.itertuples()):
        inside = r.collapse_fraction > 0.55  # a long bar holds its label: the axis ends at 1
        ax.annotate(f"{r.collapse_fraction:.0%}  (median min agree 10^{r.median_log10_q_pi_agree_min:.1f})",
                    (r.collapse_fraction, i), xytext=(-4 if inside else 4, 0), textcoords="offset points",
                    va="center", ha="right" if inside else "left", fontsize=7, color="white" if inside else "black")
    ax.set_yticks(y, table.variant, fontsize=8)
    ax.invert_yaxis()
    drawn = [(label, color) for label, mask, color in kinds if mask.any()]  # the key: the kinds of bar drawn
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=c) for _, c in drawn], [label for label, _ in drawn],
              loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=len(drawn), frameon=False)
    ax.set(xlim=(0, 1), xlabel=f"fraction of runs that collapse (q_pi_agree < {COLLAPSE:g}), {int(table.runs.iloc[0])} "
                                "runs each (grid × seeds)",
           title="Which fix prevents the collapse: the original with each combination of the four changes")
    return tight(fig)


def replay(frame: pd.DataFrame):
    """A replayed trace: KL / target above, λ of each controller below (log axes)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True, gridspec_kw={"height_ratios": [1, 1.3]})
    first = frame[frame.controller == frame.controller.iloc[0]]
    top.plot(first.step, first.kl / first.kl_target, color="k", lw=0.9)
    top.set(yscale="log", ylabel="KL / target (log)", title=f"Replay of {first.scenario.iloc[0]}")
    for name, part in frame.groupby("controller", sort=False):
        bottom.plot(part.step, part["lambda"], color=COLORS.get(name, "k"), lw=1.3, label=LABELS.get(name, name))
    bottom.set(yscale="log", xlabel="step", ylabel="λ (log)")
    bottom.legend(loc="best")
    return tight(fig)
