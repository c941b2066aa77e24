"""Figures of the learning-loop study, drawn from the study's JSON; no kernel runs here."""

from __future__ import annotations

import numpy as np

from analysis.present.plots import COLORS, plt, tight  # pyplot with the Agg backend and the report's style

CONST_COLORS = {"const:0.001": "#bdbdbd", "const:0.05": "#969696", "const:0.1": "#636363", "const:1": "#252525"}


def _color(name: str, i: int):
    """The suite's colour for fixed/original, greys for constant λ, tab10 without blue, red and grey for the rest."""
    return COLORS.get(name) or CONST_COLORS.get(name) or plt.cm.tab10((1, 2, 4, 5, 6, 8, 9)[i % 7])


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
        headline = [n for n in names if not n.startswith("ablation:")]  # the ablation variants crowd a line plot
        for ax, (key, label, scale, ylim) in zip(row[1:], panels, strict=True):
            for i, n in enumerate(headline):
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
    return tight(fig)


def grid_heatmap(result: dict):
    """Min-agreement collapse fraction per grid point (columns) and controller (rows), one panel per environment."""
    envs = list(result["envs"])
    fig, axes = plt.subplots(1, len(envs), figsize=(7 * len(envs), 0.32 * max(len(result["controllers"]), 8) + 2),
                             squeeze=False)
    for ax, env in zip(axes[0], envs, strict=True):
        block = result["envs"][env]
        names = list(block["controllers"])
        data = np.array([block["controllers"][n]["deep_fraction_per_grid_point"] for n in names])
        ax.imshow(data, vmin=0, vmax=1, cmap="Reds", aspect="auto")
        ax.grid(False)
        labels = [f"H{p['entropy_bonus']:g} aux{p['aux_reward']:g} v{p['pi_view']:g}" for p in block["grid_points"]]
        wide = [r["wide"] for r in (block["brackets"] or [])]
        labels = [lab + (" ✓" if wide and wide[i] else "") for i, lab in enumerate(labels)]
        ax.set(xticks=range(len(labels)), yticks=range(len(names)), yticklabels=names,
               title=f"{env}: min-agreement collapse fraction (✓: bracket wide enough)")
        ax.set_xticklabels(labels, rotation=60, ha="right", fontsize=7)
        for (i, j), v in np.ndenumerate(data):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v > 0.6 else "black")
    return tight(fig)


def incident(result: dict):
    """The second study's incident figure: one seed, original beside fixed; λ, the KL the controller sees (with
    target/tolerance), and log10 of the lowest agreement (ties excluded) over the odd states — those the
    even-state KL never sees; a mean over states would hide one state's collapse — with the minimum criterion's
    threshold; left the first steps, right the whole run. An incident made before the loop wrote that minimum
    (no ``log10_min_odd``) shows the mean over odd states instead, and says so on its axis."""
    inc = result["incident"]
    steps = np.asarray(inc["steps"])
    early = steps <= min(400, steps[-1])
    has_min = all("log10_min_odd" in s for s in inc["series"].values())
    threshold = np.log10(result["parameters"]["criteria"]["min_threshold"])
    fig, axes = plt.subplots(3, 2, figsize=(15, 9), sharex="col", squeeze=False)
    for col, keep in enumerate((early, np.ones_like(early))):
        for name in ("original", "fixed"):
            s = inc["series"][name]
            color = COLORS[name]
            arr = {k: np.array(s[k], float)[keep] for k in s}  # JSON's null (a NaN written) reads as NaN
            axes[0, col].plot(steps[keep], arr["lam"], color=color, lw=1.4, label=name)
            axes[1, col].plot(steps[keep], arr["kl_ema"], color=color, lw=1.0, label=name)
            low = arr["log10_min_odd"] if has_min else np.log10(arr["agree_odd"])
            axes[2, col].plot(steps[keep], low, color=color, lw=0.8, label=name)
        axes[1, col].axhline(inc["quiet_kl"], color="k", ls=":", lw=0.8, label="target / original's tolerance")
        axes[1, col].axhline(inc["kl_target"], color="grey", ls="-.", lw=0.8, label="target")
        axes[2, col].axhline(threshold, color="k", ls=":", lw=0.8, label="minimum criterion's threshold")
        axes[0, col].set(yscale="log", ylabel="λ")
        axes[1, col].set(yscale="log", ylabel="KL the controller sees (nats)")
        axes[2, col].set(ylabel="log10 min over odd states of π(Q's greedy action)" if has_min
                         else "log10 mean over odd states (no minimum in this JSON)", xlabel="step")
        axes[0, col].set_title(f"{inc['env']}, seed {inc['seed']}, KL on {inc['point']['kl_site']} states, "
                               f"{inc['point']['policy']}, aux {inc['point']['aux_reward']:g}"
                               + (": the first steps" if col == 0 else f": the run, steps 1–{int(steps[-1])}"))
    axes[0, 0].legend(fontsize=8)
    axes[1, 0].legend(fontsize=7)
    axes[2, 1].legend(fontsize=7)
    return tight(fig)


def second_overview(result: dict, names=("original", "fixed", "const:0", "const:0.001", "const:1")):
    """Per task (rows) and criterion (columns): fraction per regime of the KL axis with 95 % intervals."""
    envs = list(result["envs"])
    crits = ("relative", "minimum", "signature")
    fig, axes = plt.subplots(len(envs), len(crits), figsize=(6.2 * len(crits), 3.8 * len(envs)), squeeze=False)
    for row, env in zip(axes, envs, strict=True):
        block = result["envs"][env]
        regs = [f"{r['kl_site']}\n{'before' if r['kl_before'] else 'after'}" for r in block["regimes"]]
        shown = [n for n in names if n in block["controllers"]]
        width = 0.8 / max(len(shown), 1)
        for ax, crit in zip(row, crits, strict=True):
            for i, n in enumerate(shown):
                e = block["controllers"][n][crit]["per_regime"]
                f = np.array([x["fraction"] for x in e])
                err = [f - np.array([x["ci_low"] for x in e]), np.array([x["ci_high"] for x in e]) - f]
                ax.bar(np.arange(len(regs)) + (i - (len(shown) - 1) / 2) * width, f, width, yerr=err,
                       color=_color(n, i), label=n, error_kw={"lw": 0.7})
            ax.set(xticks=range(len(regs)), ylim=(0, 1), title=f"{env}: {crit}", ylabel="fraction of runs")
            ax.set_xticklabels(regs, fontsize=7)
        row[0].legend(fontsize=7)
    return tight(fig)
