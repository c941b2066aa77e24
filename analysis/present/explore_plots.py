"""The collapse map (issue 42 item 5), drawn from the judged search (analysis/judge/explore_study.py); no loop runs.

One figure per task: panels over KL target (rows) × τ (columns); inside a panel the small multiples are the
auxiliary reward × π's learning rate (x) and the KL site (lower and upper band). Each cell is two bars, the
original's (left) and the fixed kernel's (right): height = the fraction of post-warm-up steps λ spent at the
arm's floor, colour = the fraction of runs that drift (the relative endpoint). A bottom row shows the constant-λ
brackets of each (τ, aux, lr) group: the fraction of runs of each constant that drift.
"""

from __future__ import annotations

import textwrap

import numpy as np

from analysis.present.plots import plt

CMAP = plt.get_cmap("viridis_r")
CONST_SHADES = ("#f0f0f0", "#bdbdbd", "#969696", "#525252", "#000000")
BAND = 1.25   # the upper band's offset (outside_R above minibatch)


def _frac(a: dict) -> float:
    return a["drifted"] / a["runs"] if a["runs"] else float("nan")


def task_map(judged: dict, task: str):
    cells = [c for c in judged["cells"] if c["task"] == task]
    groups = [g for g in judged["groups"] if g["task"] == task]
    if not cells:
        raise ValueError(f"no cell of {task} in the judged search")
    targets = sorted({c["kl_target"] for c in cells})
    taus = sorted({c["tau"] for c in cells})
    sites = list(dict.fromkeys(c["kl_site"] for c in cells))
    combos = sorted({(c["aux_reward"], c["pi_lr"]) for c in cells})
    fig, axes = plt.subplots(len(targets) + 1, len(taus), figsize=(3.4 * len(taus) + 1.5, 2.1 * (len(targets) + 1) + 1),
                             squeeze=False, sharex=True)
    w = 0.38
    for i, target in enumerate(targets):
        for j, tau in enumerate(taus):
            ax = axes[i][j]
            for c in (c for c in cells if c["kl_target"] == target and c["tau"] == tau):
                x = combos.index((c["aux_reward"], c["pi_lr"]))
                y0 = BAND * sites.index(c["kl_site"])
                for dx, arm, ls in ((-w / 2, "original", "-"), (w / 2, "fixed", "--")):
                    a = c["arms"][arm]
                    colour = CMAP(_frac(a)) if np.isfinite(_frac(a)) else "white"
                    h = a["at_floor"] if np.isfinite(a["at_floor"]) else 0.0
                    ax.bar(x + dx, max(h, 0.02), width=w, bottom=y0, color=colour, edgecolor="k" if c["qualifies"] else
                           "0.6", linewidth=1.2 if c["qualifies"] else 0.4, linestyle=ls)
                if c["selected"]:
                    ax.plot(x, y0 + 1.05, marker="*", color="red", markersize=9)
            ax.set_ylim(-0.05, BAND * (len(sites) - 1) + 1.15)
            ax.set_yticks([BAND * k + 0.5 for k in range(len(sites))], [s.replace("_", " ") for s in sites], fontsize=7)
            if i == 0:
                ax.set_title(f"τ = {tau:g} × τ unit", fontsize=9)
            if j == 0:
                ax.set_ylabel(f"KL target {target:g} nats\n(site; bar = time at floor)", fontsize=8)
    for j, tau in enumerate(taus):
        ax = axes[-1][j]
        for g in (g for g in groups if g["tau"] == tau):
            x = combos.index((g["aux_reward"], g["pi_lr"]))
            arms = list(g["brackets"])
            bw = 0.8 / len(arms)
            for k, arm in enumerate(arms):
                b = g["brackets"][arm]
                ax.bar(x - 0.4 + bw * (k + 0.5), _frac(b), width=bw, color=CONST_SHADES[k % len(CONST_SHADES)],
                       edgecolor="k", linewidth=0.4, label=arm if x == 0 else None)
        ax.set_ylim(0, 1.05)
        if j == 0:
            ax.set_ylabel("constant λ:\nfraction of runs drifting", fontsize=8)
            ax.legend(fontsize=6, loc="upper left", ncol=len(CONST_SHADES))
        ax.set_xticks(range(len(combos)), [f"aux {a:g}\nlr {lr:g}" for a, lr in combos], fontsize=6, rotation=90)
        ax.set_xlabel("auxiliary reward, π learning rate", fontsize=8)
    sm = plt.cm.ScalarMappable(cmap=CMAP, norm=plt.Normalize(0, 1))
    cb = fig.colorbar(sm, ax=axes[:-1, :].ravel().tolist(), fraction=0.02, pad=0.01)
    cb.set_label("fraction of runs drifting (in-R agreement below the group's midpoint)", fontsize=8)
    title = (f"{task}: the collapse map (EXPLORATORY search). Bars: original (left, solid) and fixed (right, dashed); "
             "height = fraction of post-warm-up steps with λ at the kernel's floor, colour = fraction of runs drifting; "
             "black edge = the cell qualifies, red star = selected")
    fig.suptitle("\n".join(textwrap.wrap(title, int(fig.get_figwidth() * 14))), fontsize=9)
    return fig


def maps(judged: dict) -> dict:
    """``{task: figure}`` for every task of the judged search."""
    return {task: task_map(judged, task) for task in dict.fromkeys(c["task"] for c in judged["cells"])}
