"""The closed-loop check (``study --deep --kernel K.cu``, issue 42 item 6) on the CPU: the pairs per sentinel cell
come from the power computation on the map, the verdict follows the McNemar rule (Holm), the candidate's runs
happen in the confined child and are read back by schema, the one-line exit 2 without a map or on bad input; and
on the GPU, in the committed map's sentinel cells, λ held at 0.001 exits 1 and the fixed kernel 0."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.judge import confirm_study, explore_study, sentinel_check
from repro.core.errors import SuiteError
from repro.core.paths import ROOT
from repro.runners import confine

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from analysis.cli import deep_study, study  # noqa: E402
from repro.learning.deep import confirm, explore  # noqa: E402

FIXED = ROOT / "kernels" / "rl_q_distill_lambda_controller.cu"
CANDIDATES = ROOT / "tests" / "candidates"
SEEDS = 16

#: The search a synthetic map says it was drawn from: one task, one cell, 200 steps, 16-unit nets (the CPU suite).
#: The tiny declaration's [grid] (tests/deep/conftest.py: tiny_declaration).
GRID = """
tasks = ["Acrobot-v1"]
kl_target = [1.0]
tau = [1.0]
kl_site = ["minibatch"]
aux_reward = [1.0]
pi_lr = [1e-3]
arms = ["original", "fixed"]
constants = [0.001, 1.0]
seeds = 16
"""


def _search(fixed: list[float], floor: list[float]) -> dict:
    """A search JSON of one group and one cell: const:1 at −1, the original at −9, λ held at 0.001 and the fixed
    kernel per seed as given (r_geo_avg, log10); the midpoint is the mean of the constants' medians."""
    per = lambda v: {m: list(v) if m == "r_geo_avg" else [0.9] * len(v) for m in explore.MEASURES}
    group = {"index": 0, "task": "Acrobot-v1", "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3, "keys": list(range(SEEDS)),
             "constants": {"const:0.001": per(floor), "const:1": per([-1.0] * SEEDS)},
             "cells": [{"kl_target": 1.0, "kl_site": "minibatch",
                        "arms": {"original": per([-9.0] * SEEDS), "fixed": per(fixed)}}]}
    sel = {"min_precondition": 0.5, "min_separation": 2.0, "min_separated_seeds": 0.8, "forward": 3}
    return {"study": "exploration_4", "selection": sel, "groups": [group], "not_run": []}


@pytest.fixture()
def sentinel_map(tmp_path, monkeypatch, tiny_declaration):
    """``f(fixed, floor)``: a judged map of :func:`_search` written in ``tmp_path`` and made the command's map;
    its source declaration is the tiny one with :data:`GRID`."""
    decl = tiny_declaration(GRID)

    def write(fixed=(0.0,) * SEEDS, floor=(-9.0,) * SEEDS, per_seed=True) -> dict:
        judged = explore_study.judge(_search(list(fixed), list(floor)))
        judged["source"] = {"declaration": str(decl), "backend": "host", "device": "cpu", "reduced": False}
        if not per_seed:
            for g in judged["groups"]:
                for b in g["brackets"].values():
                    b.pop("per_seed")
        path = tmp_path / "map.json"
        path.write_text(json.dumps(judged))
        monkeypatch.setattr(deep_study, "MAP", path)
        return judged

    torch.set_num_threads(1)
    return write


def test_the_map_keeps_the_constants_per_seed_drift():
    judged = explore_study.judge(_search([0.0] * SEEDS, [-9.0] * 8 + [0.0] * 8))
    b = judged["groups"][0]["brackets"]["const:0.001"]
    assert judged["groups"][0]["midpoint"] == (-1.0 + -4.5) / 2   # const:0.001's median is −4.5 here
    assert b["per_seed"] == [True] * 8 + [False] * 8 and b["drifted"] == 8


def test_pairs_come_from_the_power_against_a_controller_held_at_the_floor():
    """The map's discordance between λ held at 0.001 and the fixed kernel on the group's seeds (13:1 of 16 here),
    half counts added, sets the pairs for 90 % power at α / cells, counting only rejections that find the floor
    worse; two cells halve the level."""
    floor = [-9.0] * 14 + [0.0] * 2
    fixed = [0.0] * 13 + [-9.0] + [0.0] + [-9.0]   # seed 13 both drift: concordant; seed 15: fixed only
    judged = explore_study.judge(_search(fixed, floor))
    found = explore_study.sentinels(judged)
    (p,) = sentinel_check.plan(judged, found, 0.05)
    assert (p["map"]["floor_only"], p["map"]["fixed_only"], p["map"]["pairs"]) == (13, 1, 16)
    n, power = confirm_study.pairs_for_power(13.5 / 17, 1.5 / 17, 0.05, 0.9, 256, first_more=True)
    assert (p["pairs"], p["power"], p["level"], p["midpoint"]) == (n, power, 0.05, -5.0)
    assert power >= 0.9 and confirm_study.mcnemar_power_discordant(n - 1, 13.5 / 17, 1.5 / 17, 0.05, True) < 0.9
    two = sentinel_check.plan(judged, found * 2, 0.05)
    assert two[0]["level"] == 0.025 and two[0]["pairs"] >= n
    capped = sentinel_check.plan(judged, found, 0.05, most=4)
    assert capped[0]["pairs"] == 4 and capped[0]["power"] < 0.9


def test_directional_power_counts_only_the_first_arm_worse():
    both = confirm_study.mcnemar_power_discordant(40, 0.3, 0.1, 0.05)
    worse = confirm_study.mcnemar_power_discordant(40, 0.3, 0.1, 0.05, first_more=True)
    better = confirm_study.mcnemar_power_discordant(40, 0.1, 0.3, 0.05, first_more=True)
    assert worse + better == pytest.approx(both) and better < 0.01 < worse < both


def _result(*cells) -> tuple[dict, list[dict]]:
    """Check runs whose candidate and fixed per-seed drift are the boolean lists given (midpoint −3)."""
    val = lambda xs: [-4.0 if x else -2.0 for x in xs]
    out, planned = [], []
    for k, (cand, fixed) in enumerate(cells):
        settings = {"task": "Acrobot-v1", "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3, "kl_target": 1.0 + k,
                    "kl_site": "minibatch"}
        out.append(settings | {"index": k, "midpoint": -3.0, "pairs": len(cand),
                               "arms": {"candidate": {"r_geo_avg": val(cand)}, "fixed": {"r_geo_avg": val(fixed)}}})
        planned.append(settings | {"power": 0.9, "level": 0.05 / len(cells),
                                   "map": {"pairs": 16, "floor_only": 15, "fixed_only": 0, "floor_drifted": 15,
                                           "fixed_drifted": 0, "runs": 16}})
    return {"cells": out}, planned


@pytest.mark.parametrize("cand, fixed, worse", [
    ([True] * 12 + [False] * 8, [False] * 20, True),          # 12:0 discordant, p 4.9e-4: more drifts → exit 1
    ([True] * 5 + [False] * 15, [False] * 20, False),         # 5:0, p 0.0625: not below α
    ([True] * 6 + [False] * 14, [False] * 6 + [True] * 6 + [False] * 8, False),   # equal counts → exit 0
    ([False] * 20, [True] * 12 + [False] * 8, False),         # fewer than the fixed kernel → exit 0
])
def test_the_verdict_follows_exact_mcnemar(cand, fixed, worse):
    judged = sentinel_check.judge(*_result((cand, fixed)), 0.05)
    (c,) = judged["cells"]
    t = c["test"]
    assert (t["only_first"], t["only_second"]) == (sum(a and not b for a, b in zip(cand, fixed, strict=True)),
                                                   sum(b and not a for a, b in zip(cand, fixed, strict=True)))
    assert c["worse"] is worse and judged["worse"] is worse
    assert (c["arms"]["candidate"]["drifted"], c["arms"]["fixed"]["drifted"]) == (sum(cand), sum(fixed))
    assert sentinel_check.lines(judged)[-1].startswith("closed-loop check:")


def test_holm_over_the_sentinel_cells():
    """5:0 gives p 0.0625 alone: not below 0.05; 6:0 gives 0.03125, yet × 2 cells under Holm it is not either."""
    assert not sentinel_check.judge(*_result(([True] * 5 + [False] * 5, [False] * 10)), 0.05)["worse"]
    one = sentinel_check.judge(*_result(([True] * 6 + [False] * 4, [False] * 10)), 0.05)
    assert one["worse"]
    two = sentinel_check.judge(*_result(([True] * 6 + [False] * 4, [False] * 10), ([False] * 10, [False] * 10)), 0.05)
    assert two["cells"][0]["test"]["p_holm"] == pytest.approx(0.0625) and not two["worse"]


def _run(*argv) -> int:
    return study.main(["--deep", "--backend", "host", *map(str, argv)])


def test_the_check_runs_the_candidate_confined_on_powered_pairs(sentinel_map, study_apart, tmp_path):
    """The fixed kernel as the candidate, in the synthetic map's one sentinel cell: the candidate's runs are the
    fixed kernel's bit for bit on the same fresh seeds (paired), so no discordant pair, exit 0; the cell runs the
    pairs the power computation gives; the JSON and the figure land."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    judged = sentinel_map()
    done = study_apart(deep_study.MAP, "--deep", "--backend", "host", "--kernel", FIXED,
                       "--json", tmp_path / "check.json", "--map", tmp_path / "check.png")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    (planned,) = sentinel_check.plan(judged, explore_study.sentinels(judged), 0.05)
    got = json.loads((tmp_path / "check.json").read_text())
    (cell,) = got["cells"]
    assert cell["pairs"] == planned["pairs"] == got["run_steps"] // (2 * 200) and cell["power"] >= 0.9
    assert cell["arms"]["candidate"]["per_seed"] == cell["arms"]["fixed"]["per_seed"]
    assert (cell["test"]["only_first"], cell["test"]["only_second"]) == (0, 0) and got["worse"] is False
    assert got["seed"] == deep_study.CHECK_SEED and cell["midpoint"] == -5.0
    assert "sentinel 1: Acrobot-v1 target 1" in out and f"{planned['pairs']} pairs: power" in out
    assert (tmp_path / "check.png").stat().st_size > 10_000


def test_the_candidates_host_build_runs_in_the_confined_child(sentinel_map, study_apart, tmp_path):
    """A candidate that opens a file for writing in $PWD ends the check with one line, exit 2, nothing written."""
    if confine.unavailable():
        pytest.skip(confine.unavailable())
    sentinel_map()
    run_in = tmp_path / "cwd"
    run_in.mkdir()
    done = study_apart(deep_study.MAP, "--deep", "--backend", "host", "--kernel", CANDIDATES / "escape_write.cu",
                       "--json", "out.json", cwd=run_in)
    assert done.returncode == 2, done.stderr
    err = [line for line in done.stderr.splitlines() if line.startswith("study: error:")]
    assert len(err) == 1 and "the candidate tried to open" in err[0] and "the run was ended" in err[0], err
    assert list(run_in.iterdir()) == []


@pytest.mark.parametrize("candidate, fixed, code", [(-9.0, 0.0, 1), (0.0, 0.0, 0), (0.0, -9.0, 0)])
def test_the_exit_code_is_the_parents_mcnemar_rule_on_what_the_child_measured(sentinel_map, tmp_path, candidate,
                                                                               fixed, code, capsys):
    """Measurements handed back by the child (here forged at the candidate's load, in the plan's schema, with
    the child's own exit 0): drift in every candidate run and none of the fixed kernel's (midpoint −5) is exit 1;
    equal drift, or fewer, is exit 0 — the parent's McNemar rule, whatever the child's status."""
    from repro.runners import plain
    from tests.catalogue import forger

    if confine.unavailable():
        pytest.skip(confine.unavailable())
    judged = sentinel_map()
    (planned,) = sentinel_check.plan(judged, explore_study.sentinels(judged), 0.05)
    n = planned["pairs"]
    arm = lambda v: {m: np.full(n, v if m == "r_geo_avg" else 0.5, np.float32) for m in explore.MEASURES}
    payload = plain.dumps({"cells": [{"candidate": arm(candidate), "fixed": arm(fixed)}], "seconds": 0.0}).decode()
    assert _run("--kernel", forger(tmp_path, confirm.MEASURED, payload, 0)) == code
    out = capsys.readouterr().out
    assert f"drift candidate {n if candidate < -5 else 0}/{n} vs fixed {n if fixed < -5 else 0}/{n}" in out, out


def test_what_the_child_hands_back_is_read_against_the_plan(tmp_path, tiny_declaration):
    """The child's measurements round-trip; every way of differing from the plan is one SuiteError."""
    import copy

    from repro.runners import plain

    decl_path = tiny_declaration(GRID)
    cells = [{"task": "Acrobot-v1", "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3, "kl_target": 1.0,
              "kl_site": "minibatch", "midpoint": -5.0, "pairs": 3}]
    decl = confirm.closed_loop(decl_path, cells, 9, 0.05)
    rec = {"arms": {arm: {m: [0.5, None, -1.25] for m in explore.MEASURES} for arm in confirm.CHECK_ARMS}}
    path = tmp_path / confirm.MEASURED
    confirm.write_measured(path, {"cells": [rec], "seconds": 1.5})
    back = confirm.read_measured(path, decl)
    (got,) = back["cells"]
    assert got["arms"] == rec["arms"] and got["keys"] == [confirm.run_key(9, decl.cells[0], i) for i in range(3)]
    assert got["midpoint"] == -5.0 and back["seconds"] == 1.5 and back["run_steps"] == 2 * 3 * 200
    good = plain.read(path, limit=1 << 20)
    bad = []
    for edit in (lambda t: t.pop("seconds"), lambda t: t["cells"].append(t["cells"][0]),
                 lambda t: t["cells"][0].pop("fixed"), lambda t: t["cells"][0]["fixed"].pop("r_geo_avg"),
                 lambda t: t["cells"][0]["fixed"].__setitem__("r_geo_avg", np.zeros(2, np.float32)),
                 lambda t: t["cells"][0]["fixed"].__setitem__("r_geo_avg", np.zeros(3, np.float64)),
                 lambda t: t.__setitem__("verdict", 0)):
        tree = copy.deepcopy(good)
        edit(tree)
        bad.append(tree)
    for tree in bad:
        path.write_bytes(plain.dumps(tree))
        with pytest.raises(SuiteError, match="the confined check's measurements"):
            confirm.read_measured(path, decl)


@pytest.mark.parametrize("setup, argv, says", [
    ("none", ["--kernel", FIXED], "no sentinel regime: the closed-loop check cannot tell a harmful controller here "
                                  "(no collapse map"),
    ("holds_nowhere", ["--kernel", FIXED], "no sentinel regime: the closed-loop check cannot tell a harmful "
                                           "controller here (the map has no cell"),
    ("not_json", ["--kernel", FIXED], "not a judged collapse map"),
    ("no_per_seed", ["--kernel", FIXED], "cannot plan the closed-loop check"),
    ("map", ["--kernel", FIXED, "--map", "x.txt"], "give a path ending in .png"),
    ("map", ["--map", "x.png"], "--map draws the closed-loop check's sentinel cells"),
    ("map", ["--kernel", FIXED, "--reduced", "--map", "x.png"], "--map draws the closed-loop check's sentinel cells"),
    ("map", ["--kernel", FIXED, "--seeds", "4"], "the closed-loop check takes no --seeds"),
    ("map", ["--kernel", FIXED, "--traces", "t.npz"], "the closed-loop check takes no --traces"),
])
def test_bad_input_is_one_line_exit_2(sentinel_map, tmp_path, monkeypatch, setup, argv, says, capsys):
    monkeypatch.chdir(tmp_path)
    if setup == "none":
        monkeypatch.setattr(deep_study, "MAP", tmp_path / "absent.json")
    elif setup == "holds_nowhere":
        sentinel_map(fixed=[-9.0] * SEEDS)
    elif setup == "not_json":
        (tmp_path / "bad.json").write_text("{")
        monkeypatch.setattr(deep_study, "MAP", tmp_path / "bad.json")
    else:
        sentinel_map(per_seed=setup != "no_per_seed")
    assert _run(*argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("study: error:") and says in lines[0], err
    assert out == ""


def _held_at(value: float) -> str:
    """The fixed kernel with λ held at ``value`` from the first step its KL EMA leaves the band (the EMA starts at
    zero, below it): floor and ceiling ``value``, ramp 1, a decay that reaches the floor in one step."""
    from repro.core.contract import CONTRACTS, load

    return load(CONTRACTS).source("fixed").with_defines(MIN_LAMBDA=value, MAX_LAMBDA=value, LAMBDA_RAMP_RATE=1.0,
                                                LAMBDA_DECAY_RATE=value / 10).text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
@pytest.mark.skipif(not deep_study.MAP.is_file(), reason=f"no committed collapse map ({deep_study.MAP.name}): the "
                    "fourth study's search draws it; the check has no sentinel cell without it")
@pytest.mark.parametrize("kernel, code", [("held_at_0.001", 1), ("fixed", 0)])
def test_on_the_gpu_a_controller_held_at_the_floor_is_caught(tmp_path, kernel, code, capsys):
    """In the committed map's sentinel cells, with the pairs its power computation gives: λ held at 0.001 drifts
    in more runs than the fixed kernel (exit 1); the fixed kernel against itself does not (exit 0)."""
    path = FIXED
    if kernel != "fixed":
        path = tmp_path / "held.cu"
        path.write_text(_held_at(0.001))
    assert study.main(["--deep", "--backend", "cupy", "--kernel", str(path)]) == code, capsys.readouterr()
