"""Figures of the learning-loop study (issue 13), drawn from the study's JSON; no kernel runs here."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from analysis.present.plots import COLORS  # noqa: E402

CONST_COLORS = {"const:0.001": "#bdbdbd", "const:0.05": "#969696", "const:0.1": "#636363", "const:1": "#252525"}


def _color(name: str, i: int):
    """The suite's colour for fixed/original, greys for constant λ, tab10 without blue, red and grey for the rest."""
    return COLORS.get(name) or CONST_COLORS.get(name) or plt.cm.tab10((1, 2, 4, 5, 6, 8, 9)[i % 7])


def _headline(names: list[str]) -> list[str]:
    """Contract controllers and constant baselines (the ablation variants crowd a line plot)."""
    return [n for n in names if not n.startswith("ablation:")]


def overview(result: dict):
    """Per environment: collapse fractions with 95 % intervals (both criteria), then q_pi_agree, min agreement,
    λ and return over steps (median, with the interquartile band for the contract controllers)."""
    envs = list(result["envs"])
    fig, axes = plt.subplots(len(envs), 5, figsize=(22, 4.2 * len(envs)), squeeze=False)
    for row, env in zip(axes, envs, strict=True):
        block = result["envs"][env]
        names = list(block["controllers"])
        steps = np.asarray(block["eval_steps"])
        y = np.arange(len(names))
        criteria = ((-0.2, "", "mean agreement < ½·uniform", None), (0.2, "deep_", "min agreement < threshold", "//"))
        for off, key, label, hatch in criteria:
            frac = np.array([block["controllers"][n][f"{key}collapse_fraction"] for n in names])
            lo = frac - np.array([block["controllers"][n][f"{key}ci_low"] for n in names])
            hi = np.array([block["controllers"][n][f"{key}ci_high"] for n in names]) - frac
            row[0].barh(y + off, frac, height=0.4, xerr=[lo, hi], color=[_color(n, i) for i, n in enumerate(names)],
                        hatch=hatch, alpha=0.8, label=label, error_kw={"lw": 0.8})
        row[0].set(yticks=y, yticklabels=names, xlim=(0, 1), xlabel="collapse fraction (95 % Clopper–Pearson)",
                   title=f"{env}: collapse per controller")
        row[0].invert_yaxis()
        row[0].legend(loc="lower right")
        # the y ranges of the min-agreement and λ panels stop where a rule without a ceiling runs away (to ±inf)
        panels = (("agree_mean", "q_pi_agree, mean over visited states", "linear", None),
                  ("log10_agree_min", "log10 min over visited states (≥ −25)", "linear", (-25, 0.5)),
                  ("lambda", "λ (1e-4 … 1e2 shown)", "log", (1e-4, 1e2)),
                  ("episode_return", "episode return", "linear", None))
        for ax, (key, label, scale, ylim) in zip(row[1:], panels, strict=True):
            for i, n in enumerate(_headline(names)):
                q = block["controllers"][n]["over_steps"][key]
                med = np.array(q["median"], dtype=float)
                ax.plot(steps, med, color=_color(n, i), lw=1.6 if n in COLORS else 1.0, label=n)
                if n in COLORS:
                    ax.fill_between(steps, np.array(q["q25"], float), np.array(q["q75"], float), color=_color(n, i), alpha=0.15)
            ax.axvline(result["parameters"]["collapse"]["warmup"], color="k", ls=":", lw=0.8)
            ax.set(yscale=scale, xlabel="step", title=f"{env}: {label}")
            if ylim:
                ax.set_ylim(*ylim)
        row[1].legend(fontsize=7)
    fig.tight_layout()
    return fig


def grid_heatmap(result: dict, key: str = "deep_"):
    """Collapse fraction per grid point (columns) and controller (rows), one panel per environment."""
    envs = list(result["envs"])
    fig, axes = plt.subplots(1, len(envs), figsize=(7 * len(envs), 0.32 * max(len(result["controllers"]), 8) + 2),
                             squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        block = result["envs"][env]
        names = list(block["controllers"])
        data = np.array([block["controllers"][n][f"{key}fraction_per_grid_point"] for n in names])
        ax.imshow(data, vmin=0, vmax=1, cmap="Reds", aspect="auto")
        ax.grid(False)
        labels = [f"H{p['entropy_bonus']:g} aux{p['aux_reward']:g} v{p['pi_view']:g}" for p in block["grid_points"]]
        wide = [r["wide"] for r in (block["brackets"] or [])]
        labels = [lab + (" ✓" if wide and wide[i] else "") for i, lab in enumerate(labels)]
        ax.set(xticks=range(len(labels)), yticks=range(len(names)), yticklabels=names,
               title=f"{env}: {'min' if key else 'mean'}-agreement collapse fraction (✓: bracket wide enough)")
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        for (i, j), v in np.ndenumerate(data):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v > 0.6 else "black")
    fig.tight_layout()
    return fig
