"""Figures of the third study (the deep loop), drawn from its JSON; no loop runs here."""

from __future__ import annotations

import numpy as np

from analysis.present.plots import COLORS, plt, tight  # pyplot with the Agg backend and the report's style

ARMS = ("original", "fixed", "const:0", "const:0.05", "const:1")
SHADES = {"const:0": "#d9d9d9", "const:0.05": "#969696", "const:1": "#252525"}


def _arr(xs) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=float)


def incident(result: dict, kl_target: float | None = None):
    """The incident figure: the run the pre-registered rule picks (primary cell), original beside fixed, same seed:
    λ and the KL EMA the controller saw per step (every 10th step), and the probe batch's log10 geometric agreement
    (with the minibatch's and the probe's 1st-percentile state) per evaluation."""
    inc = result["incident"]
    steps = np.asarray(inc["eval_steps"])
    fig, axes = plt.subplots(3, 1, figsize=(12, 9), sharex=True)
    for arm, run in inc["runs"].items():
        color = COLORS.get(arm, "k")
        label = f"{arm}" + (" (collapses)" if run["collapsed"] else "")
        if "trace_lambda" in run:
            t = np.arange(len(run["trace_lambda"])) * run["trace_every"] + 1
            axes[0].plot(t, run["trace_lambda"], color=color, lw=1.0, label=label)
            axes[1].plot(t, run["trace_kl_ema"], color=color, lw=0.8, label=label)
        else:
            axes[0].plot(steps, _arr(run["lambda"]), color=color, lw=1.0, label=label)
            axes[1].plot(steps, _arr(run["kl_ema"]), color=color, lw=0.8, label=label)
        axes[2].plot(steps, _arr(run["probe_log10_geo"]), color=color, lw=1.4, label=f"{arm}: probe, geometric")
        axes[2].plot(steps, _arr(run["mb_log10_geo"]), color=color, lw=0.8, ls="--", label=f"{arm}: minibatch, geometric")
        axes[2].plot(steps, _arr(run["probe_log10_p01"]), color=color, lw=0.8, ls=":", label=f"{arm}: probe, 1st percentile")
    if kl_target:
        axes[1].axhline(kl_target, color="grey", ls="-.", lw=0.8, label="KL target")
    axes[2].axhline(result["endpoint"]["threshold"], color="k", ls=":", lw=0.8, label="collapse threshold")
    axes[0].set(yscale="log", ylabel="λ (ISV slot 486)")
    axes[1].set(yscale="log", ylabel="KL EMA the controller sees (nats)")
    axes[2].set(ylabel="log10 π(argmax Q | s)", xlabel="step")
    title = f"primary cell, the pre-registered rule's run ({inc['why']})"
    axes[0].set_title(title)
    for ax in axes:
        ax.legend(fontsize=7, loc="best")
    return tight(fig)


def cells(result: dict):
    """Per declared cell: the collapse fraction of original, fixed and the constant-λ arms run there, with exact
    95 % intervals (the primary endpoint)."""
    names = list(result["cells"])
    fig, ax = plt.subplots(figsize=(max(8, 1.1 * len(names)), 4.2))
    width = 0.16
    for k, arm in enumerate(ARMS):
        xs, ys, lo, hi = [], [], [], []
        for i, name in enumerate(names):
            a = result["cells"][name]["arms"].get(arm)
            if a:
                xs.append(i + (k - 2) * width)
                ys.append(a["fraction"])
                lo.append(a["fraction"] - a["ci_low"])
                hi.append(a["ci_high"] - a["fraction"])
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="o", ms=4, capsize=2, label=arm,
                        color=COLORS.get(arm) or SHADES.get(arm, "k"))
    ax.set_xticks(range(len(names)), [n + (" (expl.)" if result["cells"][n].get("exploratory") else "")
                                      for n in names], rotation=30, ha="right")
    ax.set(ylabel="runs collapsing (primary endpoint)", ylim=(-0.02, 1.02))
    ax.legend(fontsize=8, ncol=5)
    return tight(fig)
