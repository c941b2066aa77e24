"""The second study's report section and its incident figure: the headline from the pre-registered primary
criterion, the secondary and exploratory results labelled, numbers read from the JSON (synthetic JSON where the
claim must follow the data; the committed JSON where the section must recompute from it)."""

from __future__ import annotations

import copy
import json
import re

import numpy as np
import pytest

from analysis.judge import study_measures as sm
from analysis.judge.study_stats import interval, mcnemar
from analysis.present import study_section
from repro.core.paths import ROOT
from repro.learning.study2 import EXPLORATORY_COLD_START_RESULT, EXPLORATORY_TARGET_RESULT

RESULTS = ROOT / "studies" / "results"
REGIMES = [{"kl_site": s, "kl_before": b, "points": [i]} for i, (s, b) in enumerate([("visited", 0), ("even", 0)])]


@pytest.fixture(scope="module")
def committed():
    return json.loads((RESULTS / "preregistered_2_cupy.json").read_text())


@pytest.fixture(scope="module")
def exploratory():
    return json.loads(EXPLORATORY_TARGET_RESULT.read_text())


@pytest.fixture(scope="module")
def cold():
    return json.loads(EXPLORATORY_COLD_START_RESULT.read_text())


def _synthetic(hits: dict[str, dict[str, list[int]]], n: int = 40) -> dict:
    """A one-task second-study JSON over two regimes (one grid point each) from per-regime hit counts:
    ``hits[controller][criterion] = [k per regime]``; original's and fixed's runs are paired seed by seed with
    the hits first, so the discordant counts are the difference."""
    verdicts = {name: {crit: [np.arange(n) < k for k in ks] for crit, ks in crits.items()} for name, crits in hits.items()}
    ctrl = {}
    for name, crits in verdicts.items():
        e = {}
        for crit, per in crits.items():
            e[crit] = {**interval(np.concatenate(per), 0.95), "per_regime": [interval(v, 0.95) for v in per],
                       "per_point": [interval(v, 0.95) for v in per],
                       "verdicts": np.concatenate(per).astype(int).tolist()}
        e["lambda_side"] = interval(np.ones(2 * n, bool), 0.95)
        e["final_unique_states_median_per_point"] = [5.0, 5.0]
        e["final_agreement_median_per_point"] = [0.5, 0.5]
        e["median_over_steps_per_regime"] = {"lam": [[0.001], [0.001]], "agree_unique": [[0.5], [0.5]]}
        ctrl[name] = e
    pair = {"a": "original", "b": "fixed", "kind": "original vs fixed"}
    for crit in verdicts["original"]:
        pair[crit] = {"per_regime": [mcnemar(a, b) for a, b in zip(verdicts["original"][crit], verdicts["fixed"][crit],
                                                                     strict=True)]}
    points = [{"kl_site": r["kl_site"], "kl_before": r["kl_before"], "policy": "view:1", "aux_reward": 1.0}
              for r in REGIMES]
    block = {"regimes": REGIMES, "grid_points": points, "eval_steps": [200], "controllers": ctrl, "pairs": [pair],
             "brackets": None}
    return {"parameters": {"criteria": {"consecutive": 13, "warmup": 0, "min_threshold": 1e-6},
                           "signature": {"floor_lambda": 0.001}}, "envs": {"Task-v0": block}}


@pytest.mark.parametrize("original, fixed", [([30, 30], [2, 3]), ([2, 3], [30, 30]), ([4, 4], [4, 4])])
def test_headline_follows_the_primary_criterion(original, fixed):
    """The headline's verdict and fractions come from the relative (primary) criterion alone, whichever way it
    falls; the minimum criterion, here always favouring the original, never changes it."""
    result = _synthetic({"original": {"relative": original, "minimum": [35, 35]},
                         "fixed": {"relative": fixed, "minimum": [0, 0]}})
    text = study_section.headline2(result)
    tests = result["envs"]["Task-v0"]["pairs"][0]["relative"]["per_regime"]
    helps = sum(t["p"] < sm.ALPHA and t["only_a"] > t["only_b"] for t in tests)
    hurts = sum(t["p"] < sm.ALPHA and t["only_b"] > t["only_a"] for t in tests)
    assert "primary criterion (relative" in text and "minimum" not in text
    frac = {n: [e["fraction"] for e in result["envs"]["Task-v0"]["controllers"][n]["relative"]["per_regime"]]
            for n in ("original", "fixed")}
    assert f"original {min(frac['original']):.1%}" in text and f"fixed {min(frac['fixed']):.1%}" in text
    if helps:
        assert f"lowers the pre-registered primary criterion significantly in {helps} of 2" in text
    else:
        assert "shows no benefit from the fix in any of the 2 task × regime cells" in text
    if original != fixed:
        assert f"significantly more often in {hurts} of them, the original in {helps}" in text


def test_secondary_gap_is_labelled_exploratory_with_what_was_not_registered():
    result = _synthetic({"original": {"relative": [4, 4], "minimum": [3, 30]},
                         "fixed": {"relative": [4, 4], "minimum": [3, 1]}})
    text = study_section.secondary_gap(result)
    e = result["envs"]["Task-v0"]["controllers"]
    assert "minimum (secondary) criterion" in text and "even states only" in text
    assert f"{e['original']['minimum']['per_regime'][1]['fraction']:.1%}" in text
    assert "no α, no multiplicity correction and no confirmatory cell" in text and "largest of 4 gaps" in text
    result["parameters"]["criteria"] |= {"alpha": 0.05, "correction": "holm", "confirmatory": "x"}
    assert "Exploratory" not in study_section.secondary_gap(result)


def test_signature_confound_is_read_from_lambda0():
    """λ = 0 meeting the signature more often than the original is said, with both fractions."""
    result = _synthetic({"original": {"relative": [4, 4], "signature": [4, 6]},
                         "fixed": {"relative": [4, 4], "signature": [0, 0]},
                         "const:0": {"relative": [9, 9], "signature": [9, 9]}})
    text = "\n".join(study_section.signature_lines(result))
    assert "λ = 0 at least as often in 2 of 2 regimes" in text
    assert "original 10.0%–15.0%, λ = 0 22.5%" in text
    result["envs"]["Task-v0"]["controllers"]["const:0"]["signature"]["per_regime"][0]["fraction"] = 0.0
    assert "λ = 0 at least as often in 1 of 2 regimes" in "\n".join(study_section.signature_lines(result))


def test_committed_section_leads_with_the_primary_criterion(committed, exploratory):
    """On the committed H200 study: the bold headline is the primary criterion's, the minimum criterion's largest
    gap follows it labelled secondary and exploratory, every criterion named in the tables carries its rank."""
    lines = study_section.second_section(committed, {"target": exploratory})
    bold = next(line for line in lines if line.startswith("**"))
    assert bold == f"**{study_section.headline2(committed)}**" and "relative" in bold
    secondary = next(line for line in lines if line.startswith("**Secondary, exploratory.**"))
    assert lines.index(secondary) > lines.index(bold) and "minimum (secondary)" in secondary
    for crit in ("relative", "minimum", "signature"):
        assert not any(f"| {crit} |" in line for line in lines)  # every table row names the rank
    for r in sm.primary_by_task(committed):
        assert f"{r['env']}, original {r['original'][0]:.1%}" in bold


def test_no_power_of_ten_prints_a_runaway_logit_digit_by_digit():
    """A lowest quartile of the first study's minimum can be −5.6e16 (a peer's logit ran away, finite still; printed
    in full it is 17 digits): it is written in scientific notation, and read from
    the data (here the committed first study with one controller's quartile set that low)."""
    first = json.loads((RESULTS / "preregistered_cupy.json").read_text())
    block = first["envs"]["FrozenLake-v1"]["controllers"]
    name = next(n for n, e in block.items() if not e.get("diverged_fraction", 0.0))
    block[name]["over_steps"]["log10_agree_min"]["q25"][-1] = -5.5834684029800368e16
    text = "\n".join(study_section.section(first, figures=False))
    assert not re.search(r"10\^\(?-?\d{5,}", text)
    lo = sm.lowest_quartiles(first)[0]
    shown = re.search(r"minimum over visited states reaches 10\^\((-?[\d.e+]+)\) \(([^,]+), ([^)]+)\)", text)
    assert np.isclose(float(shown.group(1)), lo[0], rtol=0.05) and shown.group(2, 3) == (lo[1], lo[2]) == ("FrozenLake-v1", name)


def test_incident_minimum_recomputes_from_the_series(committed):
    """The incident's lowest single-state agreement per arm after the warm-up, and the original's λ-at-floor
    stretches, as the section states them, recomputed from the committed per-step series."""
    inc = committed["incident"]
    steps = np.asarray(inc["steps"])
    judged = steps > committed["parameters"]["criteria"]["warmup"]
    text = "\n".join(study_section.second_section(committed))
    for arm in ("original", "fixed"):
        m = np.asarray(inc["series"][arm]["log10_min_odd"], float)
        k = np.nanargmin(np.where(judged, m, np.nan))
        assert f"10^{m[k]:.1f} (step {steps[k]})" in text
    lam = np.asarray(inc["series"]["original"]["lam"], np.float32)
    at = steps[judged & (lam <= np.float32(committed["parameters"]["signature"]["floor_lambda"]))]
    assert f"over steps {at[0]}–" in text and f"–{at[-1]}." in text


@pytest.mark.slow  # a 20 000-step figure drawn: seconds
def test_incident_figure_plots_the_minimum_over_the_states_the_kl_does_not_see(committed):
    from analysis.present import study_plots

    fig = study_plots.incident(committed)
    try:
        ax = fig.axes[5]  # bottom right: the whole run
        lines = {ln.get_label(): ln for ln in ax.get_lines()}
        for arm in ("original", "fixed"):
            want = np.asarray(committed["incident"]["series"][arm]["log10_min_odd"], float)
            np.testing.assert_array_equal(np.asarray(lines[arm].get_ydata(), float), want)
        assert "min over odd states" in ax.get_ylabel()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


@pytest.mark.slow  # a 20 000-step figure drawn: seconds
def test_incident_figure_without_the_minimum_says_what_it_shows(committed):
    from analysis.present import study_plots

    old = copy.deepcopy(committed)
    for s in old["incident"]["series"].values():
        del s["log10_min_odd"]
    fig = study_plots.incident(old)
    try:
        assert "no minimum in this JSON" in fig.axes[5].get_ylabel()
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    assert "holds no per-step minimum" in "\n".join(study_section.second_section(old))


def test_exploratory_run_is_shown_as_exploratory_from_its_json(exploratory):
    """The KL-target-1.0 run: its heading says not pre-registered, and every original/fixed fraction and paired
    test in its lines is the JSON's."""
    assert exploratory["as_preregistered"] is False and "not pre-registered" in exploratory["exploratory"]
    lines = study_section.exploratory_lines(exploratory)
    assert lines[0].startswith("### Exploratory, not pre-registered: the KL target at "
                               f"{exploratory['parameters']['learning']['kl_target']:g}")
    for block in exploratory["envs"].values():
        test = sm.pair(block)
        for j, r in enumerate(block["regimes"]):
            for crit in ("minimum", "relative"):
                line = next(x for x in lines if f"KL on the {study_section._regime_name(r)}, {crit} criterion" in x)
                o, f = (block["controllers"][n][crit]["per_regime"][j]["fraction"] for n in ("original", "fixed"))
                m = test[crit]["per_regime"][j]
                assert f"original {o:.1%}" in line and f"fixed {f:.1%}" in line
                assert f"{m['only_a']} against {m['only_b']} discordant runs" in line
    assert study_section.exploratory_lines(None) == []


@pytest.mark.slow  # about 20 s on 2 cores
def test_exploratory_run_reproduces_its_committed_json(host, contract, exploratory):
    from analysis.cli.study_runs import exploratory_target

    assert json.loads(json.dumps(exploratory_target(host, contract))) == exploratory


@pytest.mark.slow  # about 2 s
def test_remade_incident_is_the_committed_run(host, contract, committed):
    """Remaking the committed incident on the host passes its own bit-for-bit check and gives the committed series."""
    from analysis.cli.study_runs import remake_incident

    assert json.loads(json.dumps(remake_incident(host, contract, committed)["incident"])) == committed["incident"]


@pytest.mark.parametrize("argv, message", [
    (["--second", "--exploratory", "target", "--from-json", "x.json"], "--exploratory runs its own declared study"),
    (["--second", "--remake-incident", "--json", "x.json"], "give --from-json and --json"),
    (["--exploratory", "cold-start"], "--exploratory is the second study's"),
    (["--second", "--exploratory", "target", "--steps", "5200"], "--exploratory target takes no --steps"),
])
def test_cli_exploratory_and_remake_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    from analysis.cli import study as cli

    argv = [a if a != "x.json" else str(tmp_path / a) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_cold_start_check_is_stated_from_its_json(committed, cold):
    """The signature's λ side in the first window, per task and controller as the section states it (least–greatest
    over regimes), read from the exploratory cold-start JSON; without it the section says it did not recompute."""
    text = "\n".join(study_section.signature_lines(committed, cold))
    for env, block in cold["envs"].items():
        for name, e in block["controllers"].items():
            f = [x["fraction"] for x in e["lambda_side_first_window"]["per_regime"]]
            shown = f"{min(f):.1%}" if min(f) == max(f) else f"{min(f):.1%}–{max(f):.1%}"
            assert f"{'λ = 0' if name == 'const:0' else name} {shown}" in text.split(f"{env}: ")[-1]
    assert "is not reported" in "\n".join(study_section.signature_lines(committed))


def test_cold_start_window_is_the_runs_first_steps(host, contract, committed):
    """The cold-start check runs the first window alone: a run's first steps do not depend on its length (the
    committed incident's first 200 steps, every series, from a 200-step run)."""
    from repro.learning.incident import incident
    from repro.learning.study2 import load_prereg2

    inc = committed["incident"]
    short = incident(host, contract, load_prereg2(), inc["seed"], steps=200)
    assert short["series"] == {a: {k: v[:200] for k, v in s.items()} for a, s in inc["series"].items()}


@pytest.mark.slow  # about 12 s on 2 cores
def test_cold_start_check_reproduces_its_committed_json(host, contract, cold):
    from analysis.cli.study_runs import exploratory_cold_start

    assert json.loads(json.dumps(exploratory_cold_start(host, contract))) == cold


def test_secondary_protection_is_labelled_exploratory_with_the_other_target_beside_it():
    """'The fix prevents it' on the secondary minimum criterion is labelled exploratory, and the exploratory run at
    another KL target stands beside it for the same regime, its direction read from its own paired test."""
    hits = {"original": {"relative": [4, 4], "minimum": [30, 30]}, "fixed": {"relative": [4, 4], "minimum": [0, 0]},
            "const:1": {"relative": [0, 0], "minimum": [0, 0]}}
    result = _synthetic(hits)
    target = _synthetic({"original": {"relative": [4, 4], "minimum": [2, 2]},
                         "fixed": {"relative": [4, 4], "minimum": [30, 30]}})
    target["parameters"]["learning"] = {"kl_target": 1.0}
    plain = study_section.regime_answers(result)
    assert all("exploratory: the original collapses and the fix prevents it" in line for line in plain)
    assert not any("beside it" in line for line in plain)
    lines = study_section.regime_answers(result, target)
    m = target["envs"]["Task-v0"]["pairs"][0]["minimum"]["per_regime"][0]
    assert all("beside it, the exploratory run at KL target 1 (not pre-registered), same regime" in line for line in lines)
    assert f"{m['only_a']} against {m['only_b']} discordant runs" in lines[0] and "reversed" in lines[0]
    fix = study_section.carrying_fix(result, "minimum", target)
    assert all("minimum criterion (secondary, exploratory" in line and "reversed" in line for line in fix)
    # the other target's run going the same way: no reversal is claimed
    target = _synthetic({"original": {"relative": [4, 4], "minimum": [30, 30]},
                         "fixed": {"relative": [4, 4], "minimum": [0, 0]}})
    target["parameters"]["learning"] = {"kl_target": 1.0}
    assert not any("reversed" in line for line in study_section.regime_answers(result, target))
