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


SETTINGS = ("task", "tau", "aux_reward", "pi_lr", "kl_target", "kl_site")


def task_map(judged: dict, task: str, confirmed: dict | None = None):
    """One task's map; ``confirmed``: the judged confirmation, whose cells are marked with their verdict."""
    cells = [c for c in judged["cells"] if c["task"] == task]
    verdicts = {tuple(c[k] for k in SETTINGS): c["verdict"] for c in (confirmed or {}).get("cells", [])}
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
                word = verdicts.get(tuple(c[k] for k in SETTINGS))
                if word:
                    ax.annotate(word.replace(", ", ",\n"), (x, y0 + 1.05), xytext=(0, 6), textcoords="offset points",
                                ha="center", fontsize=5.5, color="darkred")
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
            ax.legend(fontsize=6, loc="lower left", bbox_to_anchor=(0.0, 1.0), ncol=len(CONST_SHADES), frameon=False,
                      columnspacing=0.8, handlelength=1.2)
        ax.set_xticks(range(len(combos)), [f"aux {a:g}\nlr {lr:g}" for a, lr in combos], fontsize=6, rotation=90)
        ax.set_xlabel("auxiliary reward, π learning rate", fontsize=8)
    sm = plt.cm.ScalarMappable(cmap=CMAP, norm=plt.Normalize(0, 1))
    cb = fig.colorbar(sm, ax=axes[:-1, :].ravel().tolist(), fraction=0.02, pad=0.01)
    cb.set_label("fraction of runs drifting (in-R agreement below the group's midpoint)", fontsize=8)
    title = (f"{task}: the collapse map (EXPLORATORY search). Bars: original (left, solid) and fixed (right, dashed); "
             "height = fraction of post-warm-up steps with λ at the kernel's floor, colour = fraction of runs drifting; "
             "black edge = the cell qualifies, red star = selected"
             + ("; dark red words: the confirmation's verdict on fresh seeds" if verdicts else ""))
    fig.suptitle("\n".join(textwrap.wrap(title, int(fig.get_figwidth() * 14))), fontsize=9)
    return fig


def maps(judged: dict, confirmed: dict | None = None) -> dict:
    """``{task: figure}`` for every task of the judged search (``confirmed``: the judged confirmation, marked)."""
    return {task: task_map(judged, task, confirmed) for task in dict.fromkeys(c["task"] for c in judged["cells"])}


def check(judged: dict, kernel: str):
    """The closed-loop check's map (``study --deep --kernel K.cu --map OUT.png``; analysis/judge/sentinel_check.py):
    one row per sentinel cell, the fraction of the candidate's runs that drift beside the fixed kernel's on the same
    seeds (exact 95 % intervals), λ held at 0.001 and the fixed kernel as the collapse map saw them in that cell
    (markers), and the paired test; a cell where the candidate drifts more (Holm) is marked red."""
    cells = judged["cells"]
    fig, ax = plt.subplots(figsize=(8.5, 1.0 + 0.75 * len(cells)))
    h = 0.36
    for k, c in enumerate(cells):
        y = len(cells) - 1 - k
        for dy, arm, colour in ((h / 2, "candidate", "tab:red" if c["worse"] else "tab:blue"), (-h / 2, "fixed", "0.55")):
            a = c["arms"][arm]
            f = _frac(a)
            ax.barh(y + dy, f if np.isfinite(f) else 0.0, height=h, color=colour, label=arm if k == 0 else None)
            if a["runs"]:
                ax.errorbar(f, y + dy, xerr=[[f - a["low"]], [a["high"] - f]], color="k", linewidth=0.8, capsize=2,
                            label="exact 95 % interval" if k == 0 and arm == "fixed" else None)
            ax.text(1.02, y + dy, f"{arm} {a['drifted']}/{a['runs']}", va="center", fontsize=7,
                    transform=ax.get_yaxis_transform())
        m = c["map"]
        if m["runs"]:
            ax.plot(m["floor_drifted"] / m["runs"], y, marker="x", color="k", linestyle="none", clip_on=False,
                    label="map: λ held at 0.001" if k == 0 else None)
            ax.plot(m["fixed_drifted"] / m["runs"], y, marker="|", markersize=12, color="k", linestyle="none",
                    clip_on=False, label="map: fixed kernel" if k == 0 else None)
        t = c["test"]
        ax.text(1.2, y, f"discordant {t['only_first']}:{t['only_second']}\nHolm p {t['p_holm']:.2g}, "
                f"power {c['power']:.2f}", va="center", fontsize=7, color="tab:red" if c["worse"] else "k",
                transform=ax.get_yaxis_transform())
    ax.set_yticks(range(len(cells))[::-1], [f"{c['task']}\ntarget {c['kl_target']:g}, τ {c['tau']:g}, {c['kl_site']}"
                                            f"\naux {c['aux_reward']:g}, π lr {c['pi_lr']:g}" for c in cells], fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(-0.6, len(cells) - 0.4)
    ax.set_xlabel("fraction of runs drifting (time-averaged in-R agreement below the cell's midpoint)", fontsize=8)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.45 if len(cells) < 3 else -0.15), ncol=5,
              frameon=False)
    verdict = ("the candidate drifts in more runs than the fixed kernel (exit 1)" if judged["worse"] else
               "the candidate drifts in no more runs than the fixed kernel (exit 0)")
    title = (f"Closed-loop check of {kernel} beside the fixed kernel in the collapse map's sentinel cells (where the "
             f"fixed kernel holds and λ held at 0.001 drifts): {verdict}; paired exact McNemar, Holm at "
             f"α {judged['alpha']:g}")
    ax.set_title("\n".join(textwrap.wrap(title, 110)), fontsize=8)
    return fig
