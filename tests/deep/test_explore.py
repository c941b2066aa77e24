"""The fourth study's exploratory search (studies/exploration_4.toml; issue 42 items 1, 2, 10) on the CPU: the counter
RNG, π's per-run learning rate, the floor counters, results independent of chunking, shards that merge into the
unsharded JSON byte for byte, the selection rule, and the CLI's one-line refusals (``--ray`` among them; the shards
on Ray themselves: test_explore_ray.py, in tox -e deep)."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the deep study needs PyTorch (pip install --group deep)")

from analysis.cli import study  # noqa: E402
from analysis.judge import explore_study  # noqa: E402
from repro.backends import get_backend  # noqa: E402
from repro.learning.deep import explore  # noqa: E402
from repro.learning.deep.loop import RowAdam, counter_uniform, mix32  # noqa: E402

#: A search small enough for the CPU suite: one task, two groups (two π learning rates), 2 seeds, 200 steps, 16-unit
#: nets; the declaration's keys and rules otherwise.
#: The tiny declaration's [grid] (tests/deep/conftest.py: tiny_declaration).
GRID = """
tasks = ["Acrobot-v1"]
kl_target = [0.1, 3.0]
tau = [1.0]
kl_site = ["minibatch", "outside_R"]
aux_reward = [1.0]
pi_lr = [3e-4, 3e-3]
arms = ["original", "fixed"]
constants = [0.0, 0.001, 1.0]
seeds = 2
"""


@pytest.fixture(scope="module")
def tiny(tiny_declaration):
    torch.set_num_threads(1)
    return tiny_declaration(GRID)


def _lowbias32(x: np.ndarray) -> np.ndarray:
    """Reference: lowbias32 on uint32 (NumPy's modular uint32 arithmetic)."""
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
    return x


def test_mix32_is_lowbias32_on_int32_tensors():
    x = np.concatenate([np.arange(-1000, 1000), np.array([-2**31, 2**31 - 1, 0x7FEB352D, -0x61C88647])]).astype(np.int64)
    got = mix32(torch.as_tensor(x, dtype=torch.int32)).numpy().view(np.uint32)
    np.testing.assert_array_equal(got, _lowbias32(x.astype(np.int32).view(np.uint32)))


def test_counter_uniforms_depend_on_the_key_alone():
    """Rows of one key draw the same numbers whatever the batch; other keys, steps or streams draw others; every
    value lies in (0, 1) on the 2⁻²⁴ grid."""
    keys = torch.tensor([5, -3, 5, 2**31 - 1], dtype=torch.int32)
    u = counter_uniform(keys, 3, 17, 64)
    alone = counter_uniform(keys[1:2], 3, 17, 64)
    assert torch.equal(u[1], alone[0]) and torch.equal(u[0], u[2])
    assert not torch.equal(u[0], u[1])
    assert not torch.equal(u, counter_uniform(keys, 3, 18, 64)) and not torch.equal(u, counter_uniform(keys, 4, 17, 64))
    assert torch.equal(counter_uniform(keys, 3, torch.tensor(17), 64), u)
    assert float(u.min()) > 0 and float(u.max()) < 1
    assert torch.equal(torch.round(u * 2**24), u * 2**24)
    big = counter_uniform(torch.arange(256, dtype=torch.int32), 1, 0, 256).double()
    assert abs(float(big.mean()) - 0.5) < 0.01  # 65 536 draws: the mean's standard error is 0.0011


def test_row_adam_steps_each_run_as_adam_alone_with_its_rate():
    """Per-run learning rates: each row follows torch.optim.Adam run on that row alone with its rate (float32; the
    order of operations differs, so within 1e-5 relative)."""
    gen = torch.Generator().manual_seed(0)
    w0 = torch.randn(3, 4, 5, generator=gen)
    lrs = torch.tensor([1e-3, 3e-3, 3e-4])
    grads = [torch.randn(3, 4, 5, generator=gen) for _ in range(20)]
    w = w0.clone().requires_grad_()
    opt = RowAdam([w], lrs)
    for g in grads:
        w.grad = g.clone()
        opt.step()
    for r in range(3):
        ref = w0[r].clone().requires_grad_()
        ref_opt = torch.optim.Adam([ref], lr=float(lrs[r]))
        for g in grads:
            ref.grad = g[r].clone()
            ref_opt.step()
        np.testing.assert_allclose(w[r].detach().numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-7)
    assert not torch.equal(w[0], w0[0])


@pytest.fixture(scope="module")
def search(tiny, contract):
    """The tiny search in chunks of one group and in one chunk of both."""
    decl = explore.load(tiny)
    be = get_backend("host")
    one = explore.run_search(decl, be, contract, chunk_rows=decl.rows_per_group)
    both = explore.run_search(decl, be, contract, chunk_rows=10**6)
    return decl, one, both


def test_results_do_not_depend_on_chunking(search):
    decl, one, both = search
    assert len(explore.chunks(decl, decl.rows_per_group)) == 2 and len(explore.chunks(decl, 10**6)) == 1
    assert one["groups"] == both["groups"]
    g0, g1 = one["groups"]
    assert g0["keys"] != g1["keys"], "every group's seeds are its own"
    lam = [m["lambda_final"] for c in g0["cells"] for m in c["arms"].values()]
    assert len({x for xs in lam for x in xs}) > 1, "λ moved differently across runs"


def test_floor_counters_are_the_trace_recounted(tiny, contract):
    """n_floor and n_pre equal the per-step λ and KL EMA traces recounted: steps after the warm-up with λ at the
    arm's floor (and the EMA below target/tolerance)."""
    from repro.learning.deep.loop import DeepLoop

    decl = explore.load(tiny)
    g = decl.groups[1]
    rows, entries = explore.build_rows(decl, [g], get_backend("host"), contract)
    cfg = decl.loop_config(g.task)
    loop = DeepLoop(cfg, rows, get_backend("host"), contract.slots, trace_rows=np.arange(len(entries)))
    out = loop.run()
    after = np.arange(1, cfg.steps + 1) > cfg.warmup
    for k, (arm, _g, cell, _i) in enumerate(entries):
        lam, ema = out["trace_lambda"][:, k], out["trace_kl"][:, k]
        if arm in explore.ARMS:
            c = contract.controller(arm)
            at = (lam <= np.float32(c.value("floor"))) & after
            quiet = ema < np.float32(cell[0] / c.value("tolerance"))
            assert out["n_floor"][k] == at.sum() and out["n_pre"][k] == (at & quiet).sum(), (arm, cell)
        else:
            assert out["n_floor"][k] == 0 == out["n_pre"][k]
    assert out["n_floor"].max() > 0, "some run reached its floor (the counters were exercised)"


def _cli(*argv) -> int:
    return study.main(["--explore-4", "--backend", "host", *map(str, argv)])


def test_shards_merge_into_the_unsharded_json_byte_for_byte(tiny, tmp_path, capsys):
    decl = explore.load(tiny)
    rows = decl.rows_per_group
    assert _cli("--declaration", tiny, "--chunk-rows", rows, "--json", tmp_path / "all.json") == 0
    for i in (1, 2):
        assert _cli("--declaration", tiny, "--chunk-rows", rows, "--shard", f"{i}/2", "--json", tmp_path / f"s{i}.json") == 0
    assert _cli("--merge", tmp_path / "s2.json", tmp_path / "s1.json", "--json", tmp_path / "merged.json") == 0
    assert (tmp_path / "merged.json").read_bytes() == (tmp_path / "all.json").read_bytes()
    assert _cli("--merge", tmp_path / "s1.json", "--json", tmp_path / "half.json") == 0
    assert json.loads((tmp_path / "half.json").read_text())["not_run"] == [1]
    capsys.readouterr()
    assert _cli("--from-json", tmp_path / "all.json", "--judged", tmp_path / "j.json", "--plot", tmp_path / "map.png") == 0
    assert "EXPLORATORY search: 8 cells" in capsys.readouterr().out
    assert (tmp_path / "map_Acrobot-v1.png").stat().st_size > 0
    assert json.loads((tmp_path / "j.json").read_text())["counts"]["cells"] == 8


@pytest.mark.parametrize("argv, says", [
    (["--shard", "3/2"], "--shard '3/2'"),
    (["--merge", "a.json"], "--merge writes the joined search: give --json"),
    (["--chunk-rows", "0"], "--chunk-rows must be at least 1"),
    (["--declaration", "no/such.toml"], "cannot read the declaration"),
    (["--from-json", "studies/results/preregistered_3_calibration.json"], "not a JSON of the exploration_4 study"),
    (["--from-json", "x.json", "--bench", "8"], "give one of --from-json, --bench"),
    (["--ray", "0"], "--ray 0: give at least 1 shard"),
    (["--ray", "2", "--shard", "1/2"], "--ray runs every shard: give no --shard"),
    (["--ray", "2", "--merge", "a.json"], "give one of --merge, --ray"),
    (["--ray-address", "local"], "--ray-address picks the cluster of --ray N: give --ray"),
])
def test_bad_input_is_one_line_exit_2(argv, says, capsys):
    assert _cli(*argv) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("study: error:") and says in lines[0], err


def test_ray_not_installed_is_one_line_naming_its_group(monkeypatch, tmp_path, capsys):
    """Without Ray, ``--ray N`` stops before anything runs or is written, in one line that says how to install it."""
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert _cli("--reduced", "--ray", 2, "--json", tmp_path / "x.json") == 2
    assert capsys.readouterr().err.strip() == "study: error: --ray needs Ray: pip install --group ray"
    assert not (tmp_path / "x.json").exists()


def _group(const1, const001, orig, fixed, pre):
    per = lambda v: {"r_geo_avg": v, "precondition": [pre] * len(v), "at_floor": [pre] * len(v),
                     "ret_avg": [0.0] * len(v)}
    return {"index": 0, "task": "T", "tau": 1.0, "aux_reward": 1.0, "pi_lr": 1e-3,
            "constants": {"const:1": per(const1), "const:0.001": per(const001)},
            "cells": [{"kl_target": t, "kl_site": "minibatch", "arms": {"original": per(o), "fixed": per(f)}}
                      for t, o, f in zip((0.1, 1.0, 3.0, 0.3), orig, fixed, strict=True)]}


SEL = {"min_precondition": 0.5, "min_separation": 2.0, "min_separated_seeds": 0.8, "forward": 3}


def test_selection_rule_on_constructed_groups():
    """Anchors at 0 and −4 put the midpoint at −2; a run below it drifts. Four cells with gaps 1, −0.5, 0.5, 0
    (drift fractions): the three largest |gap| go forward, either sign."""
    g = _group([0.0] * 4, [-4.0] * 4,
               orig=[[-3] * 4, [-1] * 4, [-3, -3, -1, -1], [-1] * 4],
               fixed=[[-1] * 4, [-3, -3, -1, -1], [-1] * 4, [-1] * 4], pre=0.9)
    judged = explore_study.judge({"selection": SEL, "groups": [g]})
    assert judged["groups"][0]["midpoint"] == -2.0
    assert [c["gap"] for c in judged["cells"]] == [1.0, -0.5, 0.5, 0.0]
    assert all(c["qualifies"] for c in judged["cells"])
    # |gap| 0.5 twice with |median difference| 1 twice: the declaration's order decides (target 1 before 3)
    assert [c["kl_target"] for c in judged["selected"]] == [0.1, 1.0, 3.0]


@pytest.mark.parametrize("pre, const001, qualifies", [
    (0.49, [-4.0] * 5, False),                 # the precondition on fewer than half the steps
    (0.5, [-4.0] * 4 + [-1.0], True),          # 4 of 5 seeds separated: 80 %
    (0.5, [-4.0] * 3 + [-1.0] * 2, False),     # 3 of 5: 60 %
])
def test_a_cell_qualifies_only_where_both_conditions_hold(pre, const001, qualifies):
    g = _group([0.0] * 5, const001, orig=[[-3] * 5] * 4, fixed=[[-1] * 5] * 4, pre=pre)
    judged = explore_study.judge({"selection": SEL, "groups": [g]})
    assert all(c["qualifies"] is qualifies for c in judged["cells"])
    assert judged["fewer_than_declared"] is (not qualifies)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")
def test_on_the_gpu_results_do_not_depend_on_chunking(tiny, contract):
    """The tiny search on the GPU (cupy controllers, the step in a CUDA graph) in one chunk per group and in one
    chunk of both: the same per-run measures (the batch size must not change a run's bits on the device either)."""
    decl = explore.load(tiny)
    be = get_backend("cupy")
    one = explore.run_search(decl, be, contract, device="cuda", graph=True, chunk_rows=decl.rows_per_group)
    both = explore.run_search(decl, be, contract, device="cuda", graph=True, chunk_rows=10**6)
    assert one["groups"] == both["groups"]


def test_skipping_the_unused_forward_kl_changes_no_bit(small, contract):
    """Where no run uses the forward KL the loop does not compute it: every recorded series keeps its bits."""
    from repro.learning.deep.study import small_loop

    torch.set_num_threads(1)
    outs = []
    for any_forward in (False, True):
        loop = small_loop(get_backend("host"), contract, ["original", "fixed"], 2, small)
        assert loop.any_forward is False
        loop.any_forward = any_forward
        outs.append(loop.run())
    for k, v in outs[0].items():
        if k != "seconds":
            raw = lambda a: np.ascontiguousarray(a).view(np.uint8)
            np.testing.assert_array_equal(raw(v), raw(outs[1][k]), k)
