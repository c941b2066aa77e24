"""The third study's report section (analysis/present/deep_section.py) and the five verdict words
(analysis/judge/verdict_words.py): every sentence follows the study's JSON. Expectations are computed here from the
committed JSON or from a perturbed copy of it, never copied from it; no PyTorch, no loop."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from analysis.judge import deep_study
from analysis.judge.report_measures import critical_lambda
from analysis.judge.verdict_words import MEANING, Verdict, verdict
from analysis.present import deep_section, summary
from repro.core.paths import ROOT

RESULTS = ROOT / "studies" / "results"


@pytest.fixture(scope="module")
def committed():
    return json.loads((RESULTS / "preregistered_3_cupy.json").read_text())


@pytest.fixture(scope="module")
def lv(committed, contract):
    return deep_section.levels(committed["pair"], contract)


@pytest.fixture
def study(committed):
    return copy.deepcopy(committed)


def _values(xs) -> np.ndarray:
    return np.array([np.nan if x is None else x for x in xs], dtype=float)


def _after(cell) -> np.ndarray:
    return np.asarray(cell["eval_steps"]) > cell["warmup"]


def _precondition_cells(result, floor) -> list[str]:
    """Cells whose original median run sits at ``floor`` on at least half the evaluations after the warm-up."""
    out = []
    for name, c in result["cells"].items():
        lam = _values(c["arms"]["original"]["median_series"]["lambda"])[_after(c)]
        if (lam <= np.float32(floor)).sum() >= lam.size / 2:
            out.append(name)
    return out


@pytest.mark.parametrize("pre, more, held, word", [
    (False, None, None, Verdict.PRECONDITION_ABSENT),
    (False, True, False, Verdict.PRECONDITION_ABSENT),
    (True, False, True, Verdict.NOT_REPRODUCED),
    (True, True, True, Verdict.REPRODUCED_FIX_HOLDS),
    (True, True, False, Verdict.REPRODUCED_FIX_FAILS),
    (True, False, False, Verdict.CONTRADICTED),
])
def test_the_five_words_follow_the_three_answers(pre, more, held, word):
    assert verdict(pre, more, held) is word


def test_the_five_words_are_one_registry_each_with_its_meaning():
    assert [str(w) for w in Verdict] == ["precondition absent", "not reproduced", "reproduced, the fix holds",
                                         "reproduced, the fix does not hold", "contradicted"]
    assert set(MEANING) == set(Verdict)
    with pytest.raises(ValueError):
        verdict(True)


def test_primary_cell_reads_precondition_absent_with_its_evidence(committed, lv):
    """The committed primary cell: the original's λ never at its floor; the headline says so with the counts
    recomputed here, and never 'not reproduced'."""
    text = deep_section.headline(committed, lv)
    c = committed["cells"]["primary"]
    assert "primary" not in _precondition_cells(committed, lv["original"]["floor"])
    assert text.startswith(f"primary cell ({c['arms']['original']['runs']} seeds): **precondition absent**")
    assert "not reproduced" not in text
    n = int(_after(c).sum())
    ceil = {a: int((_values(c["arms"][a]["median_series"]["lambda"])[_after(c)] >= np.float32(lv[a]["ceiling"])).sum())
            for a in ("original", "fixed")}
    if ceil == {"original": n, "fixed": n}:
        assert f"at every one of the {n} evaluations after the warm-up" in text
    at_floor = int((_values(c["arms"]["original"]["median_series"]["lambda"])[_after(c)]
                    <= np.float32(lv["original"]["floor"])).sum())
    assert f"at its floor {lv['original']['floor']:g} at {at_floor} of {n} evaluations" in text
    m = c["mcnemar"]
    assert f"(discordant {m['only_first']}:{m['only_second']}, exact McNemar p" in text


def test_where_the_precondition_held_the_fractions_come_from_the_json(study, lv):
    """Each cell where the original sat at its floor is named with its runs at the floor and both collapse
    fractions; moving runs off the floor changes the sentence."""
    floor = lv["original"]["floor"]
    held = [n for n in _precondition_cells(study, floor) if n != "primary"]
    assert held, "the committed JSON holds a cell where the original's λ sat at its floor"
    name = held[0]
    arm = study["cells"][name]["arms"]["original"]
    fin = _values(arm["per_seed"]["final_lambda"])
    k = int((fin == np.float32(floor)).sum())
    text = deep_section.headline(study, lv)
    a, b = arm, study["cells"][name]["arms"]["fixed"]
    m = study["cells"][name]["mcnemar"]
    assert f"{name} (KL target" in text and f"{100 * k / fin.size:.1f} % of runs ({k} of {fin.size};" in text
    assert f"collapse original {100 * a['fraction']:.1f} % against fixed {100 * b['fraction']:.1f} %" in text
    assert f"(discordant {m['only_first']}:{m['only_second']}," in text
    moved = [i for i, x in enumerate(fin) if x == np.float32(floor)][:3]
    for i in moved:
        arm["per_seed"]["final_lambda"][i] = 1.0
    assert f"{100 * (k - len(moved)) / fin.size:.1f} % of runs ({k - len(moved)} of {fin.size};" in \
        deep_section.headline(study, lv)


def test_a_primary_cell_at_the_floor_is_read_against_the_reference(study, lv):
    """Put the original's median λ at its floor in the primary cell: the word is no longer 'precondition absent'
    but the one the paired tests against λ = 1 give, computed here."""
    c = study["cells"]["primary"]
    floor = float(np.float32(lv["original"]["floor"]))
    c["arms"]["original"]["median_series"]["lambda"] = [floor] * len(c["eval_steps"])
    o = deep_study.mcnemar_exact(np.array(c["arms"]["original"]["per_seed"]["collapsed"]),
                                 np.array(c["arms"]["const:1"]["per_seed"]["collapsed"]))
    f = deep_study.mcnemar_exact(np.array(c["arms"]["fixed"]["per_seed"]["collapsed"]),
                                 np.array(c["arms"]["const:1"]["per_seed"]["collapsed"]))
    alpha = study["endpoint"]["alpha"]
    more = lambda m: m["only_first"] > m["only_second"] and m["p"] < alpha  # noqa: E731
    word = verdict(True, more(o), not more(f))
    text = deep_section.headline(study, lv)
    assert text.startswith(f"primary cell ({c['arms']['original']['runs']} seeds): **{word}**")
    assert "precondition absent" not in text
    # the original collapsing in every run where λ = 1 held: reproduced, the fixed kernel's answer decides which
    c["arms"]["original"]["per_seed"]["collapsed"] = [True] * len(c["arms"]["original"]["per_seed"]["collapsed"])
    assert deep_section.five_words(study, lv)["primary"]["verdict"] in (Verdict.REPRODUCED_FIX_HOLDS,
                                                                          Verdict.REPRODUCED_FIX_FAILS)


def test_in_brief_carries_the_headline_and_the_device_from_the_json(committed, lv):
    brief = deep_section.headline(committed, lv)
    assert "**precondition absent**" in brief and "not reproduced" not in brief
    assert summary.map_brief(None) == []


def test_reading_states_the_bracket_and_lost_arms_from_the_data(study, lv, contract):
    lines = deep_section.reading(study, lv, contract)
    arms = study["cells"]["primary"]["arms"]
    bracket = next(line for line in lines if "constant-λ bracket" in line)
    fired = [a.split(":")[1] for a in arms if a.startswith("const:") and arms[a]["collapses"]]
    assert f"fires in some runs at λ = {', '.join(fired)}" in bracket
    arms["const:1"]["collapses"] = 1
    bracket = next(line for line in deep_section.reading(study, lv, contract) if "constant-λ bracket" in line)
    fired = [a.split(":")[1] for a in arms if a.startswith("const:") and arms[a]["collapses"]]
    assert "1" in fired and bracket.endswith(f"fires in some runs at λ = {', '.join(fired)}.")
    for arm, v in arms.items():
        fin = _values(v["per_seed"]["final_lambda"])
        lost = [line for line in lines if line.startswith(f"- **λ lost ({arm},")]
        assert bool(lost) == (not np.isfinite(fin).any())
        if lost:
            geo = _values(v["per_seed"]["time_avg_geo"])
            k = int((~np.isfinite(geo)).sum())
            assert f"not finite in {'all ' + str(k) if k == geo.size else f'{k} of {geo.size}'} runs" in lost[0]
    assert not any("neither kernel's λ stayed low" in line for line in lines)


def test_descriptives_name_what_the_json_does_not_record(study, lv):
    """The pre-registered descriptives: those the JSON holds are tabled (median over runs, computed here), those it
    lacks are named; adding one to the JSON moves it from the second to the first."""
    lines = deep_section.descriptives(study, lv)
    text = "\n".join(lines)
    per = study["cells"]["primary"]["arms"]["original"]["per_seed"]
    for name, key in deep_section.DESCRIPTIVES.items():
        if key in per:
            assert f"{name}, median run" in lines[0]
        else:
            assert name in text.split("Not recorded per run", 1)[1].split("\n", 1)[0]
    row = next(line for line in lines if line.startswith("| primary | original |"))
    assert f"| {np.nanmedian(_values(per['time_avg_match'])):.3g} |" in row
    name = "1st-percentile log10 agreement (probe)"
    for c in study["cells"].values():
        for a in c["arms"].values():
            a["per_seed"]["time_avg_p01"] = [-2.5] * len(a["per_seed"]["collapsed"])
    lines = deep_section.descriptives(study, lv)
    assert f"{name}, median run" in lines[0]
    assert name not in "\n".join(lines[2:])


def test_caveats_are_read_from_the_calibration(committed):
    calib = json.loads((RESULTS / "preregistered_3_calibration.json").read_text())
    text = deep_section.caveats(committed, calib, deep_section.prereg_toml())
    frac = next(v["fraction_meeting_endpoint"] for k, v in calib["betas"].items() if float(k) == calib["beta"])
    assert f"met the endpoint in {100 * frac:.1f} % of its {calib['seeds']} pilot runs" in text
    assert f"seed {committed['incident']['seed']} of the primary cell" in text
    calib = copy.deepcopy(calib)
    calib["betas"] = {k: {**v, "fraction_meeting_endpoint": 0.75} for k, v in calib["betas"].items()}
    assert "met the endpoint in 75.0 %" in deep_section.caveats(committed, calib, None)
    assert "calibration's JSON is absent" in deep_section.caveats(committed, None, None)


def test_toy_scales_are_read_from_the_toy_runs():
    import types

    import pandas as pd

    params = {"kl_target": 1.5, "actor_lr": 0.4, "conflict": 1.0, "distill_lr": 2.0}
    rb = pd.DataFrame({"actor_lr": [0.4, 0.8], "kl_target": [1.5, 3.0]})
    text = summary.toy_scales(types.SimpleNamespace(closed_loop={"fixed": {"parameters": params}}, robustness=rb))
    assert "tuned on the toy itself for the in-repo controllers" in text
    assert f"KL target {params['kl_target']:g} nat" in text
    assert f"= {critical_lambda(0.4, 1.0, 2.0):g} ({critical_lambda(0.4, 1.0, 2.0):g}, " \
           f"{critical_lambda(0.8, 1.0, 2.0):g} over the grid's actor_lr)" in text
