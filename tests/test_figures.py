"""The report's figures read alone: fig6 draws each scenario's KL input under its λ with a plain title, fig9's
fraction axis stays within [0, 1] with a key for its colours (drawn from small frames: no kernel runs)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro.core.ablation import FACTORS
from repro.runners.scenarios import catalogue


@pytest.fixture(scope="module")
def plots():
    # imported here, not at the top: matplotlib.pyplot costs about 0.9 s of CPU in every process that collects
    # this module (the controller and each xdist worker); only the worker that runs these tests pays it here
    from analysis.present import plots

    return plots


@pytest.fixture(autouse=True)
def _closed(plots):
    yield
    plots.plt.close("all")


def test_every_catalogue_scenario_has_a_plain_title(contract):
    """A panel's title is words, not the scenario's code name (bad-value cases, never drawn in fig6, keep it)."""
    for name in ("fixed", "original"):
        for s in catalogue(contract.controller(name)):
            if s.family == "bad_values":
                assert s.title == s.name
            else:
                assert s.title != s.name and " " in s.title and s.title.startswith("KL"), s.name


def test_scenario_grid_draws_the_kl_input_under_each_lambda(contract, plots):
    scenarios = [s for s in catalogue(contract.controller("fixed")) if s.name in ("aligned", "step_up", "drift")]
    frames = []
    for name in ("original", "fixed"):
        for s in scenarios:
            frames.append(pd.DataFrame({"controller": name, "scenario": s.name, "step": np.arange(1, s.steps + 1),
                                        "kl": s.kl, "kl_target": s.target, "lambda": np.full(s.steps, 0.1),
                                        "lambda0": s.lambda0}))
    fig = plots.scenario_grid(pd.concat(frames), [s.name for s in scenarios], {s.name: s.title for s in scenarios})
    lam_axes = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in lam_axes] == [s.title for s in scenarios]
    for ax, s in zip(lam_axes, scenarios, strict=True):
        below = [other for other in fig.axes if other is not ax and ax in other.get_shared_x_axes().get_siblings(other)]
        assert len(below) == 1 and below[0].get_ylabel() in ("KL / target", "")
        (line,) = [ln for ln in below[0].get_lines() if len(ln.get_xdata()) == s.steps]  # both saw the same KL: one
        assert np.array_equal(line.get_ydata(), s.kl / s.target)


def test_ablation_fraction_axis_within_0_and_1_with_a_key(plots):
    variants = [dict.fromkeys(FACTORS, False), {**dict.fromkeys(FACTORS, False), next(iter(FACTORS)): True},
                dict.fromkeys(FACTORS, True)]
    table = pd.DataFrame([{**v, "variant": f"v{i}", "collapse_fraction": f, "median_log10_q_pi_agree_min": -3.0,
                           "runs": 10} for i, (v, f) in enumerate(zip(variants, (1.0, 0.5, 0.0), strict=True))])
    fig = plots.ablation(table)
    ax = fig.axes[0]
    assert ax.get_xlim() == (0.0, 1.0)
    legend = ax.get_legend()
    assert legend is not None and [t.get_text() for t in legend.get_texts()] == [
        "none of the four changes (the original)", "some of them", "all four (the fix)"]
