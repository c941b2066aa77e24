"""The peer comparison's figure: λ under sustained aligned KL for every controller (drawn from measured data)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.present.plots import COLORS as BASE_COLORS
from analysis.present.plots import plt  # pyplot with the Agg backend and the report's style

COLORS = {**BASE_COLORS, "ppo_paper": "#2ca02c", "rllib": "#9467bd", "ziegler": "#8c564b", "tf_agents": "#e377c2",
          "modular_rl": "#ff7f0e", "batch_ppo": "#bcbd22", "pid_lagrangian": "#17becf", "geco": "#222222"}


def aligned(traces: pd.DataFrame):
    """λ (log) over steps of KL = target/100 for each controller; a cross marks the step λ becomes exactly 0."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    tiny = float(np.finfo(np.float32).smallest_subnormal)
    for name, rows in traces.groupby("controller", sort=False):
        step, lam = rows.step.to_numpy(), rows["lambda"].to_numpy(dtype=np.float64)
        positive = lam > 0
        ax.plot(step[positive], lam[positive], color=COLORS.get(name, "grey"), lw=1.5, label=name)
        zero = np.flatnonzero(lam == 0)
        if zero.size:
            ax.plot(step[zero[0]], tiny, "x", color=COLORS.get(name, "grey"), ms=8, mew=2)
            ax.annotate(f"{name}: λ = 0 at step {step[zero[0]]}", (step[zero[0]], tiny), xytext=(6, 8 + 12 * len(ax.texts)),
                        textcoords="offset points", color=COLORS.get(name, "grey"), fontsize=8)
    ax.axhline(float(np.finfo(np.float32).tiny), color="k", ls=":", lw=0.8)
    ax.annotate("smallest normal float32 (below: subnormal)", (0, float(np.finfo(np.float32).tiny)), xytext=(4, 3),
                textcoords="offset points", fontsize=7)
    ax.set(xscale="symlog", yscale="log", ylim=(tiny / 3, 3e3), xlim=(0, traces.step.max() * 1.2),
           xlabel="steps of aligned KL (KL = target/100; symlog)",
           ylabel="λ (coefficient, log)", title="Sustained aligned KL: where each rule's λ ends up")
    ax.legend(loc="center left", ncol=2)  # the empty middle left: every rule is near its seed λ there
    return fig
