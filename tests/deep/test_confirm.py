"""The fourth study's confirmation (issue 42 items 3–4): the power computation against simulation, the verdict rule,
Holm over the cells, the plan written once from a search, and a smoke run on the CPU whose pairing holds (every
arm of one seed starts from the same weights: the constant-λ arms' λ never moves)."""

from __future__ import annotations

import contextlib
import json

import numpy as np
import pytest

from analysis.judge import confirm_study as cs
from analysis.judge.verdict_words import Verdict as V
from repro.backends import backend_unavailable, get_backend


def test_power_matches_a_simulated_mcnemar():
    """The exact power equals the rejection rate of scipy's binomtest on simulated discordant pairs (20 000 studies:
    a standard error of 0.0035 at power 0.5)."""
    from scipy import stats

    rng = np.random.default_rng(0)
    n, p10, p01, alpha = 40, 0.3, 0.1, 0.05
    hits = 0
    draws = rng.multinomial(n, [p10, p01, 1 - p10 - p01], size=20000)
    for b, c, _ in draws:
        hits += (b + c) > 0 and stats.binomtest(int(b), int(b + c), 0.5).pvalue <= alpha
    assert abs(hits / 20000 - cs.mcnemar_power_discordant(n, p10, p01, alpha)) < 0.015


def test_pairs_for_power_is_the_smallest_that_reaches_it():
    n, got = cs.pairs_for_power(0.3, 0.05, 0.05 / 3, 0.9, 512)
    assert got >= 0.9 and n < 512
    assert all(cs.mcnemar_power_discordant(m, 0.3, 0.05, 0.05 / 3) < 0.9 for m in range(max(2, n - 3), n))
    assert cs.pairs_for_power(0.2, 0.2, 0.05, 0.9, 64) == (64, cs.mcnemar_power_discordant(64, 0.2, 0.2, 0.05))


@pytest.mark.parametrize("pre, reproduced, beyond, p, first, second, word", [
    (0.2, True, False, 1e-9, 30, 0, V.PRECONDITION_ABSENT),     # no precondition: nothing else counts
    (0.9, True, False, 1e-4, 30, 2, V.REPRODUCED_FIX_HOLDS),
    (0.9, True, False, 0.2, 30, 20, V.REPRODUCED_FIX_FAILS),    # not fewer than the original by the primary test
    (0.9, True, True, 1e-4, 30, 12, V.REPRODUCED_FIX_FAILS),    # fewer, yet beyond λ = 1's reference
    (0.9, False, True, 1e-4, 2, 30, V.CONTRADICTED),            # the fix drifts where the original held
    (0.9, False, False, 0.5, 3, 2, V.NOT_REPRODUCED),
    (float("nan"), True, False, 1e-4, 30, 2, V.PRECONDITION_ABSENT),
])
def test_cell_verdict(pre, reproduced, beyond, p, first, second, word):
    assert cs.cell_verdict(pre, 0.5, reproduced, beyond, p, 0.05, first, second) == word


def test_overall_takes_the_first_word_any_cell_has():
    assert cs.overall([V.REPRODUCED_FIX_HOLDS, V.PRECONDITION_ABSENT]) == V.REPRODUCED_FIX_HOLDS
    assert cs.overall([V.REPRODUCED_FIX_HOLDS, V.REPRODUCED_FIX_FAILS]) == V.REPRODUCED_FIX_FAILS
    assert cs.overall([V.REPRODUCED_FIX_HOLDS, V.CONTRADICTED, V.NOT_REPRODUCED]) == V.CONTRADICTED
    assert cs.overall([V.PRECONDITION_ABSENT]) == V.PRECONDITION_ABSENT


def _cell(index, orig, fixed, const1, pre=0.9, mid=-3.0):
    """A confirmation cell whose runs drift (r_geo_avg below ``mid``) per the boolean lists given."""
    val = lambda xs: [mid - 1 if x else mid + 1 for x in xs]
    arm = lambda xs, p: {"r_geo_avg": val(xs), "precondition": [p] * len(xs), "at_floor": [p] * len(xs)}
    return {"index": index, "task": "Acrobot-v1", "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3, "kl_target": 1.0,
            "kl_site": "minibatch", "midpoint": mid, "pairs": len(orig),
            "arms": {"original": arm(orig, pre), "fixed": arm(fixed, pre), "const:1": arm(const1, 0.0)}}


def test_judge_tests_each_cell_and_corrects_with_holm():
    n = 40
    strong = _cell(0, [True] * 30 + [False] * 10, [False] * 38 + [True] * 2, [False] * n)
    tie = _cell(1, [True] * 20 + [False] * 20, [False] * 20 + [True] * 20, [False] * n)
    judged = cs.judge({"alpha": 0.05, "min_precondition": 0.5, "cells": [strong, tie]})
    a, b = judged["cells"]
    assert (a["primary"]["only_first"], a["primary"]["only_second"]) == (30, 2)
    assert a["primary"]["p_holm"] == pytest.approx(min(1, 2 * a["primary"]["p"]))  # the smaller p: × 2 cells
    assert a["verdict"] == V.REPRODUCED_FIX_HOLDS and b["verdict"] == V.REPRODUCED_FIX_FAILS
    assert judged["verdict"] == V.REPRODUCED_FIX_FAILS
    assert a["arms"]["original"]["low"] < 0.75 < a["arms"]["original"]["high"]
    quiet = cs.judge({"alpha": 0.05, "min_precondition": 0.5, "cells": [_cell(0, [True] * n, [False] * n,
                                                                              [False] * n, pre=0.1)]})
    assert quiet["verdict"] == V.PRECONDITION_ABSENT


def test_a_run_without_an_in_r_state_counts_in_no_pair():
    c = _cell(0, [True, True, False], [False, False, False], [False] * 3)
    c["arms"]["fixed"]["r_geo_avg"][1] = None
    got = cs.judge({"alpha": 0.05, "min_precondition": 0.5, "cells": [c]})["cells"][0]
    assert got["primary"]["pairs"] == 2 and got["arms"]["fixed"]["runs"] == 2


def _search(orig, fixed):
    """A judged-search stand-in with one selected cell whose per-seed drift is given."""
    cell = {"group": 0, "task": "Acrobot-v1", "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3, "kl_target": 1.0,
            "kl_site": "minibatch", "arms": {"original": {"per_seed": orig}, "fixed": {"per_seed": fixed}}}
    return {"groups": [{"index": 0, "midpoint": -2.5}], "selected": [cell]}


def test_plan_reads_the_search_discordance_with_half_counts():
    orig = [True] * 10 + [False] * 6
    fixed = [False] * 8 + [True] * 2 + [False] * 6
    (p,) = cs.plan(_search(orig, fixed), 0.05, 0.9, 512)
    assert (p["search_original_only"], p["search_fixed_only"], p["search_pairs"]) == (8, 0, 16)
    n, power = cs.pairs_for_power(8.5 / 17, 0.5 / 17, 0.05, 0.9, 512)
    assert (p["pairs"], p["power"], p["midpoint"]) == (n, power, -2.5)


torch = pytest.importorskip("torch", reason="the confirmation's runs need PyTorch (pip install --group deep)")


def _cli(*argv) -> int:
    from analysis.cli import study

    return study.main(["--confirm-4", *map(str, argv)])


def test_plan_is_written_once_and_a_reduced_run_pairs_its_arms(tmp_path, capsys):
    from repro.learning.deep import explore

    decl = explore.load(explore.DECLARATION, reduced=True)
    groups = [{"index": 0, "task": "Acrobot-v1", "tau": decl.taus[0], "aux_reward": decl.auxes[0],
               "pi_lr": decl.lrs[0], "keys": [0, 1],
               "constants": {a: {"r_geo_avg": [-1.0, -1.0]} for a in ("const:1", "const:0.001")},
               "cells": [{"kl_target": decl.targets[0], "kl_site": decl.sites[0],
                          "arms": {"original": {"precondition": [1.0, 1.0], "r_geo_avg": [-9.0, -9.0]},
                                   "fixed": {"precondition": [1.0, 1.0], "r_geo_avg": [0.0, -9.0]}}}]}]
    groups[0]["constants"]["const:0.001"]["r_geo_avg"] = [-9.0, -9.0]
    for a in groups[0]["constants"].values():
        a.update({m: [0.0, 0.0] for m in explore.MEASURES if m != "r_geo_avg"})
    for arm in groups[0]["cells"][0]["arms"].values():
        arm.update({m: [0.0, 0.0] for m in explore.MEASURES if m not in arm})
    search = {"study": "exploration_4", "declaration": decl.path, "shard": None, "groups": groups,
              "selection": decl.selection, "not_run": []}
    (tmp_path / "s.json").write_text(json.dumps(search))
    prereg = tmp_path / "p.toml"
    assert _cli("--plan", tmp_path / "s.json", "--out", prereg) == 0
    text = prereg.read_text()
    assert "midpoint = -5.0" in text and "exploratory = false" in text
    assert _cli("--plan", tmp_path / "s.json", "--out", prereg) == 2
    assert "written once" in capsys.readouterr().err
    assert _cli("--declaration", prereg, "--reduced", "--backend", "host", "--json", tmp_path / "c.json") == 0
    out = json.loads((tmp_path / "c.json").read_text())
    (cell,) = out["cells"]
    assert set(cell["arms"]) == set(out["arms"]) and cell["pairs"] == 2
    for arm, value in (("const:1", 1.0), ("const:0.001", np.float32(0.001))):
        assert cell["arms"][arm]["lambda_final"] == [float(str(np.float32(value)))] * 2
    assert _cli("--from-json", tmp_path / "c.json") == 0
    assert "CONFIRMATORY" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["--plan", "/nonexistent.json", "--out", "/tmp/x.toml"], "cannot read"),
    (["--plan", "a.json"], "give --out"),
    (["--out", "x.toml"], "--plan's"),
    (["--declaration", "/nonexistent.toml", "--backend", "host"], "cannot read the pre-registration"),
])
def test_bad_input_is_one_line_exit_2(argv, says, capsys):
    assert _cli(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1


def _two_task_plan(tiny_declaration, tmp_path):
    """A closed-loop plan over both tasks of a tiny search (one cell each, 2 pairs, 200 steps)."""
    from repro.learning.deep import confirm

    cartpole = '[tasks."CartPole-v1"]\nregion_obs = 3\nregion_threshold = 0.5\ntau_unit = 0.5\nbeta = 0.001\n'
    grid = ('tasks = ["Acrobot-v1", "CartPole-v1"]\nkl_target = [1.0]\ntau = [1.0]\nkl_site = ["minibatch"]\n'
            'aux_reward = [1.0]\npi_lr = [1e-3]\narms = ["original", "fixed"]\nconstants = [0.001, 1.0]\nseeds = 2\n')
    path = tmp_path / "two_tasks.toml"
    text = tiny_declaration(grid).read_text()
    path.write_text(text.replace("[grid]", cartpole + "[grid]", 1))
    cells = [{"task": t, "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3, "kl_target": 1.0, "kl_site": "minibatch",
              "midpoint": -5.0, "pairs": 2} for t in ("Acrobot-v1", "CartPole-v1")]
    return confirm.closed_loop(path, cells, 11, 0.05)


_CUDA = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")]


@pytest.mark.parametrize("device, graph", [("cpu", False), pytest.param("cuda", True, marks=_CUDA),
                                           pytest.param("cuda", False, marks=_CUDA)])
def test_loops_side_by_side_give_the_bits_of_one_after_another(tiny_declaration, tmp_path, contract, device, graph):
    """The tasks' loops in threads (on CUDA, a stream each: what run does there; graphs or eager) hand back, run
    for run, the measures the same loops give one after another; on_chunk sees each task's cells as it ends."""
    from repro.learning.deep import confirm

    decl = _two_task_plan(tiny_declaration, tmp_path)
    name = "cupy" if device == "cuda" else "host"
    if backend_unavailable(name):
        pytest.skip(backend_unavailable(name))
    backend = get_backend(name)
    per_task = [[c] for c in decl.cells]
    sources = {"candidate": contract.source("original")}  # the candidate's rows: the original kernel
    apart = [confirm.run_chunk(decl, cells, backend, contract, device=device, graph=graph, sources=sources)[0]
             for cells in per_task]
    seen = []
    together = confirm.side_by_side(decl, per_task, backend, contract, device, graph, None,
                                    lambda done: seen.append([r["index"] for r in done]), sources)
    assert together["cells"] == [r for part in apart for r in part]
    assert together["run_steps"] == 2 * 2 * 2 * 200 and sorted(map(len, seen)) == [1, 2] and seen[-1] == [0, 1]


def test_an_interrupt_stops_the_loops_side_by_side(tiny_declaration, tmp_path, contract, monkeypatch):
    """Ctrl-C while the loops run (here: the first loop's progress raises it): side_by_side raises at once and the
    other loop stops at its next evaluation instead of running its remaining steps."""
    from repro.learning.deep import confirm
    from repro.learning.deep.loop import DeepLoop

    decl = _two_task_plan(tiny_declaration, tmp_path)
    real, steps = DeepLoop.run, []

    def watched(loop, graph=False, progress=None, stop=None):
        if loop.env.spec.name == "Acrobot-v1":
            raise KeyboardInterrupt
        stop.wait(30)  # the other loop starts once the interrupt has been raised
        out = None
        with contextlib.suppress(KeyboardInterrupt):
            out = real(loop, graph=graph, progress=progress, stop=stop)
        steps.append(int(loop.t.item()))
        return out

    monkeypatch.setattr(DeepLoop, "run", watched)
    with pytest.raises(KeyboardInterrupt):
        confirm.side_by_side(decl, [[c] for c in decl.cells], get_backend("host"), contract, "cpu", False, None,
                             None, {"candidate": contract.source("fixed")})
    assert steps == [0]


def test_an_error_in_one_loop_side_by_side_keeps_the_others_cells(tiny_declaration, tmp_path, contract, monkeypatch):
    """One loop fails (here: Acrobot's raises at its start): the other runs to its end, its cells reach on_chunk
    (what the confirmation writes), and the error is raised after, not lost and not in the other's place."""
    from repro.learning.deep import confirm
    from repro.learning.deep.loop import DeepLoop

    decl = _two_task_plan(tiny_declaration, tmp_path)
    real = DeepLoop.run

    def failing(loop, graph=False, progress=None, stop=None):
        if loop.env.spec.name == "Acrobot-v1":
            raise RuntimeError("a loop's own failure")
        return real(loop, graph=graph, progress=progress, stop=stop)

    monkeypatch.setattr(DeepLoop, "run", failing)
    seen, said = [], []
    with pytest.raises(RuntimeError, match="a loop's own failure"):
        confirm.side_by_side(decl, [[c] for c in decl.cells], get_backend("host"), contract, "cpu", False,
                             said.append, lambda done: seen.append([(r["index"], r["task"]) for r in done]),
                             {"candidate": contract.source("fixed")})
    assert seen == [[(1, decl.cells[1].task)]] and decl.cells[1].task != "Acrobot-v1"
    assert any("[1/2] failed (RuntimeError: a loop's own failure); the other loops run on" in line for line in said)


def test_on_cuda_run_puts_each_tasks_cells_side_by_side(tiny_declaration, tmp_path, contract, monkeypatch):
    """run on CUDA hands every task's cells, in the plan's order, to side_by_side; elsewhere the loops run one after
    another (the CPU cases above)."""
    from repro.learning.deep import confirm

    decl = _two_task_plan(tiny_declaration, tmp_path)
    seen = []
    monkeypatch.setattr(confirm, "side_by_side", lambda d, per_task, *a: seen.append(per_task) or {"cells": []})
    confirm.run(decl, get_backend("host"), contract, device="cuda")
    assert seen == [[[decl.cells[0]], [decl.cells[1]]]]
