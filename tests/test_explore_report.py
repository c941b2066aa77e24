"""The fourth study's In brief bullets (analysis/present/explore_section.py) are read from the judged map and the
judged confirmation: counts follow the cells given, and nothing renders without a map."""

from __future__ import annotations

import copy

from analysis.present import explore_section as es


def _arm(drifted, runs=16, pre=0.0, floor=0.0):
    return {"drifted": drifted, "runs": runs, "precondition": pre, "at_floor": floor}


def _map():
    cell = lambda pre, o, f: {"task": "Acrobot-v1", "precondition": pre, "arms": {"original": _arm(o), "fixed": _arm(f)}}
    group = {"task": "Acrobot-v1", "brackets": {"const:0.001": _arm(12), "const:1": _arm(0)}}
    return {"selection": {"min_precondition": 0.5}, "seeds": 16, "counts": {"cells": 3},
            "cells": [cell(0.9, 16, 0), cell(0.9, 16, 16), cell(0.1, 0, 16)], "groups": [group]}


def test_counts_follow_the_cells():
    t = es.per_task(_map())["Acrobot-v1"]
    assert (t["cells"], t["pre"], t["pre_original"], t["pre_fixed"], t["pre_fix_helps"], t["off_fixed_only"]) == \
        (3, 2, 2, 1, 1, 1)
    m = copy.deepcopy(_map())
    m["cells"][1]["arms"]["fixed"]["drifted"] = 2   # the fixed kernel now holds there too
    assert es.per_task(m)["Acrobot-v1"]["pre_fix_helps"] == 2
    assert es.dose(_map())["Acrobot-v1"] == {"const:0.001": 0.75, "const:1": 0.0}


def test_the_brief_reads_the_map_and_the_confirmation():
    assert es.brief(None) == []
    (line,) = es.brief(_map())
    assert "2 of 3 cells" in line and "EXPLORATORY" in line and "× 16 seeds" in line
    conf = {"verdict": "reproduced, the fix holds", "cells": [
        {"task": "CartPole-v1", "kl_target": 3.0, "tau": 0.3, "kl_site": "outside_R", "aux_reward": 0.3, "pi_lr": 0.003,
         "arms": {"original": {"drifted": 11, "runs": 11}, "fixed": {"drifted": 0, "runs": 11}},
         "primary": {"only_first": 11, "only_second": 0, "p_holm": 0.003}, "verdict": "reproduced, the fix holds"}]}
    lines = es.brief(_map(), conf)
    assert "original 11/11 vs fixed 0/11, discordant 11:0" in lines[1] and "Overall: **reproduced, the fix holds**" in lines[1]
