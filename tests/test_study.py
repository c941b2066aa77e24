"""The learning-loop study: the batched stepper against gymnasium, the compiled loop against the
array reference, determinism, the constant-λ baseline, the CLI's errors, and a reduced study (the full
pre-registered one is marked slow)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

gymnasium = pytest.importorskip("gymnasium", reason="the learning study needs gymnasium (pip install --group study)")
pytest.importorskip("scipy", reason="the study's intervals need scipy (pip install --group study)")

from analysis.cli import study as cli  # noqa: E402
from analysis.cli.study_runs import reduced_first, run_first  # noqa: E402
from analysis.judge.first_study import merge  # noqa: E402
from analysis.judge.study_stats import exact_interval  # noqa: E402
from repro.core.errors import SuiteError  # noqa: E402
from repro.core.isv import new_isv  # noqa: E402
from repro.learning import agent, controllers, reference, rng  # noqa: E402
from repro.learning.env import BatchedEnv, make  # noqa: E402
from repro.learning.prereg import load_prereg, parse_seeds  # noqa: E402

ENVS = ("FrozenLake-v1", "CliffWalking-v1", "Taxi-v4")
TINY_GRID = {"entropy_bonus": (0.0,), "aux_reward": (0.0, 1.0), "pi_view": (1,)}


@pytest.fixture(scope="module")
def prereg():
    return load_prereg()


@pytest.fixture(scope="module")
def reduced(host, contract, prereg):
    return reduced_first(host, contract, prereg)


@pytest.mark.parametrize("name", ENVS)
def test_batched_stepper_matches_gymnasium(name):
    """Same seeds, same actions, same uniforms: states, rewards, terminations and truncations bit for bit."""
    from gymnasium.utils import seeding

    seeds, steps = range(6), 700
    envs = [gymnasium.make(name) for _ in seeds]
    twins = [seeding.np_random(s)[0] for s in seeds]  # the generator reset(seed=s) installs
    _, tables = make(name, default_max_steps=200)
    stepper = BatchedEnv(np, tables)
    first = [env.reset(seed=s)[0] for env, s in zip(envs, seeds, strict=True)]
    state = stepper.reset(np.array([t.random() for t in twins]))
    assert state.tolist() == first
    actions = np.random.default_rng(0).integers(0, tables.n_actions, (steps, len(envs)))
    t_ep = np.zeros(len(envs), dtype=int)
    registered_limit = envs[0].spec.max_episode_steps is not None
    for t in range(steps):
        state, reward, term = stepper.step(state, actions[t], np.array([tw.random() for tw in twins]))
        t_ep += 1
        trunc = ~term & (t_ep >= tables.max_episode_steps)
        got = [env.step(int(a)) for env, a in zip(envs, actions[t], strict=True)]
        assert state.tolist() == [g[0] for g in got]
        assert reward.view(np.uint64).tolist() == np.array([g[1] for g in got], dtype=np.float64).view(np.uint64).tolist()
        assert term.tolist() == [g[2] for g in got]
        # gymnasium truncates where the task registers a limit; elsewhere the study's default limit applies
        assert (trunc if registered_limit else np.zeros_like(trunc)).tolist() == [g[3] for g in got]
        done = term | trunc
        for i in np.flatnonzero(done):
            assert envs[i].reset()[0] == stepper.reset(np.array([twins[i].random()]))[0]
            state[i] = envs[i].unwrapped.s
        t_ep[done] = 0


def test_uniforms_depend_only_on_seed_step_stream():
    a = rng.uniform(np, np.arange(10, dtype=np.uint64), 7, rng.ENV)
    b = rng.uniform(np, np.arange(5, 10, dtype=np.uint64), 7, rng.ENV)
    assert np.array_equal(a[5:].view(np.uint64), b.view(np.uint64))
    assert ((a >= 0) & (a < 1)).all() and len(set(a.tolist())) == 10
    assert not np.array_equal(a, rng.uniform(np, np.arange(10, dtype=np.uint64), 7, rng.ACTION))
    both = rng.uniforms(np, np.arange(10, dtype=np.uint64), [(7, rng.ENV), (8, rng.RESET)])
    assert np.array_equal(both[:, 0].view(np.uint64), a.view(np.uint64))
    reset = rng.uniform(np, np.arange(10, dtype=np.uint64), 8, rng.RESET)
    assert np.array_equal(both[:, 1].view(np.uint64), reset.view(np.uint64))


def test_agreement_counts_ties_and_visited_states_only():
    q = np.array([[[1.0, 1.0, 0.0], [0.0, 2.0, 0.0], [5.0, 0.0, 0.0]]])  # state 0: a tie of actions 0 and 1
    theta = np.log(np.array([[[0.2, 0.3, 0.5], [0.6, 0.3, 0.1], [1e-30, 0.5, 0.5]]]))
    visited = np.array([[True, True, False]])
    log_pi = np.log(np.exp(theta) / np.exp(theta).sum(axis=2, keepdims=True))
    mean, log_min = reference.agreement(np, q, log_pi, visited)
    assert np.isclose(mean[0], (0.5 + 0.3) / 2) and np.isclose(log_min[0], np.log10(0.3))
    # ties excluded: only state 1 (greedy action 1 alone) is judged
    unique = reference.unique_agreement(np, q, log_pi)
    mean, log_min = reference.weighted_agreement(np, unique, visited.astype(float))
    assert np.isnan(unique[0, 0]) and np.isclose(mean[0], 0.3) and np.isclose(log_min[0], np.log10(0.3))
    visited[0, 2] = True  # π gives Q's greedy action 1e-30 there
    _, log_min = reference.agreement(np, q, log_pi, visited)
    assert np.isclose(log_min[0], -30, atol=1e-9)


def _bits(a):
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


# About 4 s a task on the host: the slow job (the GPU command keeps one task on the device). The fast CPU run
# holds each task's stepper to gymnasium (above) and the loop to itself (same seeds, any batch: below).
@pytest.mark.slow_on_host
@pytest.mark.parametrize("env", [pytest.param("FrozenLake-v1", marks=pytest.mark.slow), "CliffWalking-v1"])
def test_compiled_loop_follows_the_reference(backend, host, contract, prereg, env):
    """The compiled loop (kernels/learning_loop.cuh) against the array statement, run by run: the same
    trajectories (returns and λ bit for bit: same actions, same outcomes, same controller inputs) and
    agreement/KL within rounding: the reference uses NumPy's exp and log, the loop its own (both within 2 ulp),
    and NumPy sums the agreement over 8 or more states pairwise where the loop sums them in order."""
    from dataclasses import replace

    _, tables = make(env, prereg.learning.default_max_episode_steps)
    groups = [controllers.group(backend, n, contract) for n in ("fixed", "original", "const:0.001")]
    grid = {k: np.asarray(v, float) for k, v in
            {"entropy_bonus": [0.0, 0.05, 0.0], "aux_reward": [0.0, 1.0, 0.2], "pi_view": [1, 1, 4]}.items()}
    learning = replace(prereg.learning, steps=2000)
    seeds = parse_seeds("0:5")
    ours = agent.run_loop(backend, tables, groups, learning, seeds, grid)
    ref = reference.run_reference(host, tables, groups, learning, seeds, grid)
    assert np.array_equal(ours.steps, ref.steps)
    assert np.array_equal(_bits(ours.lam), _bits(ref.lam))
    assert np.array_equal(_bits(ours.episode_return), _bits(ref.episode_return))
    for key in ("agree_mean", "log10_agree_min", "kl_ema"):
        assert np.allclose(getattr(ours, key), getattr(ref, key), rtol=1e-9, atol=1e-12, equal_nan=True), key
    assert (ours.lam != ours.lam[0]).any()  # λ moved: the controllers were in the loop


@pytest.mark.slow  # about 5 s per task
@pytest.mark.parametrize("env", ["FrozenLake-v1", "CliffWalking-v1"])
def test_compiled_loop_follows_the_reference_on_the_second_study_axes(backend, host, contract, prereg, env):
    """The second study's axes (where and when the KL is measured, the auxiliary reward on odd states, the linear
    policy) and its measurements (ties excluded, odd states, the replay ring, the quiet-floor run) in the compiled
    loop against the array statement, as the test above."""
    from dataclasses import replace

    _, tables = make(env, prereg.learning.default_max_episode_steps)
    groups = [controllers.group(backend, n, contract) for n in ("fixed", "original", "const:0")]
    grid = {k: np.asarray(v, float) for k, v in
            {"entropy_bonus": [0.0, 0.05, 0.0, 0.0, 0.0], "aux_reward": [1.0, 0.2, 1.0, 1.0, 0.0],
             "pi_view": [1, 4, 1, 4, 1], "kl_site": [0, 1, 2, 1, 2], "kl_before": [1, 0, 0, 1, 1],
             "aux_odd": [1, 1, 1, 0, 1], "features": [0, 0, 8, 8, 0]}.items()}
    learning = replace(prereg.learning, steps=1600)
    measure = agent.Measure(replay_capacity=64, replay_sample=4, quiet_kl=float(np.float32(0.1) / np.float32(1.5)),
                            floor_lambda=0.001)
    seeds = parse_seeds("0:4")
    ours = agent.run_loop(backend, tables, groups, learning, seeds, grid, measure)
    ref = reference.run_reference(host, tables, groups, learning, seeds, grid, measure)
    for key in ("lam", "episode_return", "n_unique", "quiet_floor_run"):
        assert np.array_equal(_bits(getattr(ours, key)), _bits(getattr(ref, key))), key
    for key in ("agree_mean", "log10_agree_min", "kl_ema", "agree_unique", "log10_min_unique", "agree_odd",
                "log10_min_odd", "agree_replay", "log10_min_replay"):
        assert np.allclose(getattr(ours, key), getattr(ref, key), rtol=1e-9, atol=1e-12, equal_nan=True), key
    n_points = len(grid["pi_view"])
    runs = ours.lam.reshape(len(ours.steps), len(groups), n_points, len(seeds))
    assert (runs[:, 0] != runs[0, 0]).any() and (runs[:, 2] == 0).all()  # λ moved; const:0 held it at 0
    assert np.isfinite(ours.agree_replay[:, ours.n_unique[-1] > 0]).any() and (ours.quiet_floor_run > 0).any()


def test_exact_interval_closed_form():
    n = 40
    lo, hi = exact_interval(0, n, 0.95)
    assert lo == 0 and np.isclose(hi, 1 - 0.025 ** (1 / n))
    lo, hi = exact_interval(n, n, 0.95)
    assert hi == 1 and np.isclose(lo, 0.025 ** (1 / n))


def test_constant_kernel_holds_lambda(backend, contract):
    """const:X leaves λ's bits as seeded under KL far above, inside and far below the band."""
    group = controllers.group(backend, "const:0.05", contract)
    lam0 = np.float32([0.001, 0.05, 0.1, 1.0] * 3)
    kl = np.tile(np.float32([100.0] * 4 + [0.1] * 4 + [1e-4] * 4), (300, 1))
    lam, _ = backend.compile(group.source, group.slots).run_looped(new_isv(contract.slots, lam0), kl, np.full_like(kl, 0.1))
    assert np.array_equal(lam.view(np.uint32), np.tile(lam0, (300, 1)).view(np.uint32))


def test_controller_names(host, contract):
    names = controllers.expand(["fixed", "ablation", "fixed"], contract)
    assert names[0] == "fixed" and len(names) == 15 and len(set(names)) == 15
    # the groups the pre-registrations write: 4 fixes alone, 4 with one removed, the contract's entries
    fixes = controllers.expand(["single_fixes", "fixes_removed"], contract)
    assert len(fixes) == 8 and set(fixes) <= set(names)
    peers = controllers.expand(["peers"], contract)
    # as pre-registered: the entries without state of their own (the stateful peers are named one by one)
    assert set(peers) == set(contract.peers())
    assert controllers.expand(["contract"], contract) == sorted(n for n, c in contract.controllers.items() if not c.stateful)
    class Unbuilt:  # names and seeds only: the ablation's learners are built where they run (the report)
        def compile_learner(self, source, slots):
            return None

    seed = contract.controller("fixed").value("seed_lambda")
    assert controllers.group(Unbuilt(), "ablation:seed", contract).seed_lambda == seed
    for bad in ("nope", "const:x", "const:1e-40", "const:-0.5", "ablation:speed"):
        with pytest.raises(SuiteError):
            controllers.group(host, bad, contract)


def test_parse_seeds():
    assert parse_seeds("3:6").tolist() == [3, 4, 5]
    for bad in ("6:3", "3", "a:b", "-1:2", "2:2"):
        with pytest.raises(SuiteError):
            parse_seeds(bad)


def test_same_seeds_same_json(host, contract, prereg):
    args = (host, contract, ["FrozenLake-v1"], ["fixed", "original", "const:0.1"], parse_seeds("0:3"), prereg)
    a, b = (json.dumps(run_first(*args, grid=TINY_GRID, steps=600)) for _ in range(2))
    assert a == b


def test_runs_do_not_depend_on_their_batch(host, contract, prereg):
    """A study split by controller and merged equals the joint study (what merge() relies on)."""
    seeds = parse_seeds("0:3")
    joint = run_first(host, contract, ["FrozenLake-v1"], ["fixed", "original"], seeds, prereg, grid=TINY_GRID, steps=600)
    parts = [run_first(host, contract, ["FrozenLake-v1"], [n], seeds, prereg, grid=TINY_GRID, steps=600)
             for n in ("original", "fixed")]
    assert merge(parts)["envs"] == joint["envs"]


def _well_formed(result: dict) -> None:
    """Every task ran every controller; intervals hold their fractions; verdicts add up; constant λ held."""
    json.dumps(result, allow_nan=False)  # strict JSON: undefined values are null, never NaN
    for block in result["envs"].values():
        assert list(block["controllers"]) == result["controllers"]
        for name, entry in block["controllers"].items():
            assert entry["ci_low"] <= entry["collapse_fraction"] <= entry["ci_high"], name
            assert entry["deep_ci_low"] <= entry["deep_collapse_fraction"] <= entry["deep_ci_high"], name
            assert sum(entry["verdicts"]["collapsed"]) == entry["persisting"] + entry["recovered"]
            assert np.isclose(np.mean(entry["verdicts"]["deep"]), entry["deep_collapse_fraction"])
            if name.startswith("const:"):
                lam = entry["over_steps"]["lambda"]
                assert set(lam["q25"]) == set(lam["q75"]) == {float(np.float32(name.split(":")[1]))}
        assert block["brackets"] is not None and all(isinstance(r["wide"], bool) for r in block["brackets"])


def test_reduced_study(reduced):
    """The CI-sized study, well formed (:func:`_well_formed`)."""
    _well_formed(reduced)


@pytest.mark.device_only  # on the host this would be two host runs: test_same_seeds_same_json
def test_backends_agree_bit_for_bit(backend, host, contract, prereg):
    """The GPU and the CPU run the same loop with the same arithmetic (its own exp and log): the same JSON, bit
    for bit, apart from the backend's name."""
    args = (contract, ["FrozenLake-v1", "CliffWalking-v1"], ["fixed", "original", "const:0.001", "ppo_paper"], parse_seeds("0:4"),
            prereg)
    grid = {"entropy_bonus": (0.0, 0.05), "aux_reward": (1.0,), "pi_view": (1, 4)}
    ours, ref = run_first(backend, *args, grid=grid, steps=3000), run_first(host, *args, grid=grid, steps=3000)
    assert ours.pop("backend") == backend.name and ref.pop("backend") == "host"
    assert json.dumps(ours) == json.dumps(ref)


def test_committed_gpu_study_matches_the_cpu_one():
    """The committed pre-registered study from the H200 and from the CPU: every verdict, trace quantile and
    fraction the same; only the backend's name and scipy's interval bounds (its version differs) may differ."""
    from repro.core.paths import ROOT

    results = ROOT / "studies" / "results"
    gpu, cpu = (json.loads((results / f"preregistered_{b}.json").read_text()) for b in ("cupy", "host"))
    assert (gpu.pop("backend"), cpu.pop("backend")) == ("cupy", "host") and gpu["as_preregistered"]

    def compare(a, b, key=""):
        if isinstance(a, dict):
            assert a.keys() == b.keys(), key
            for k in a:
                compare(a[k], b[k], k)
        elif isinstance(a, list):
            assert len(a) == len(b), key
            for x, y in zip(a, b, strict=True):
                compare(x, y, key)
        elif "ci_" in key:
            assert np.isclose(a, b, rtol=1e-9, atol=1e-12), (key, a, b)
        else:
            assert a == b, (key, a, b)

    compare(gpu, cpu)


def test_elementary_functions(backend, host, contract):
    """The loop's exp and log: within 2 ulp of NumPy's (and the same special values), and the same bits on every
    backend. The inputs have full random mantissas (``u·2^e``), over the range the loop meets: logits' differences
    for exp, sums of A probabilities in [1, A] for log, and beyond."""
    rng = np.random.default_rng(7)
    x = np.concatenate([rng.uniform(-50, 50, 20000), rng.uniform(-746, 710, 20000), rng.uniform(-1e-3, 1e-3, 5000),
                        np.exp(rng.uniform(-700, 700, 5000)), 1 + rng.random(40000) * 5,
                        [0.0, -0.0, 1.0, -1.0, 709.78, 709.79, -745.1, -745.14, np.inf, -np.inf, np.nan, 5e-324, 1e-310]])
    learner = backend.compile_learner(contract.source("fixed"), contract.slots)
    got = learner.elementary(x)
    with np.errstate(all="ignore"):
        want = np.exp(x), np.log(x)
    for g, w in zip(got, want, strict=True):
        normal = np.isfinite(w) & (w != 0)
        assert np.array_equal(g[~normal], w[~normal], equal_nan=True)
        assert (np.abs(g[normal] - w[normal]) <= 2 * np.spacing(np.abs(w[normal]))).all()
    for g, h in zip(got, host.compile_learner(contract.source("fixed"), contract.slots).elementary(x), strict=True):
        assert np.array_equal(g.view(np.uint64), h.view(np.uint64))


@pytest.mark.slow  # a reduced study through the CLI (2 s)
def test_cli_writes_json_and_plot(tmp_path, capsys):
    out, plot, grid, md = tmp_path / "s.json", tmp_path / "s.png", tmp_path / "figs" / "g.png", tmp_path / "s.md"
    assert cli.main(["--env", "FrozenLake-v1", "--controllers", "fixed,original,const:0.001,const:1", "--seeds", "0:2",
                     "--steps", "5200", "--backend", "host", "--json", str(out), "--plot", str(plot),
                     "--grid-plot", str(grid), "--markdown", str(md)]) == 0
    err = capsys.readouterr().err  # progress from the start, per environment × controller
    assert err.startswith("study: [1/4] FrozenLake-v1 × fixed: 24 runs × 5200 steps on host")
    assert "study: [4/4] FrozenLake-v1 × const:1 done in " in err
    text = md.read_text()
    assert "](s.json)" in text and "](s.png)" in text and "](figs/g.png)" in text and str(tmp_path) not in text
    assert grid.read_bytes()[:4] == b"\x89PNG" and "| FrozenLake-v1 | const:1 |" in text
    data = json.loads(out.read_text())
    entry = data["envs"]["FrozenLake-v1"]["controllers"]["original"]
    for key in ("collapse_fraction", "ci_low", "ci_high", "verdicts"):
        assert key in entry
    assert data["as_preregistered"] is False and plot.read_bytes()[:4] == b"\x89PNG"
    assert "/" not in data["preregistration"][:1]  # repo-relative


@pytest.mark.parametrize("argv, message", [
    (["--env", "NoSuchEnv-v0"], "unknown or unusable gymnasium environment"),
    (["--env", "Blackjack-v1"], "not a tabular environment"),
    (["--seeds", "9:3"], "--seeds"),
    (["--seeds", "x"], "--seeds"),
    (["--controllers", "fixed,nope"], "unknown contract 'nope'"),
    (["--json", "{tmp}/file.txt/out.json"], "is a file, not a folder"),
    # every environment is checked before the first one runs: no work is lost to a typo in the last name
    (["--env", "FrozenLake-v1,Nope-v0", "--json", "{tmp}/s.json"], "'Nope-v0'"),
    (["--env", "Taxi-v3"], "unknown or unusable gymnasium environment"),  # one line despite its deprecation warning
    (["--steps", "5000"], "above the warm-up"),  # nothing after the warm-up: nothing would be judged
    (["--steps", "5300"], "a multiple of"),
    (["--steps", "20000000000"], "at most"),
    (["--seeds", "0:100000000000"], "at most"),
    (["--seeds", "18446744073709551615:18446744073709551617"], "2^64"),
    (["--controllers", "const:1e-50"], "normal float32"),
    (["--controllers", "ablation:floor+floor"], "each at most once"),
    (["--plot", "{tmp}/figure.txt"], "ending in .png"),
    (["--json", "{tmp}/same", "--markdown", "{tmp}/same"], "its own path"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    (tmp_path / "file.txt").write_text("a file, so no folder can be made under it")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    defaults = {"--env": "FrozenLake-v1", "--controllers": "fixed", "--seeds": "0:1", "--steps": "5200", "--backend": "host"}
    for flag, value in defaults.items():
        if flag not in argv:
            argv += [flag, value]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("study: error:") and message in err, err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full on this system")
def test_cli_a_failing_write_after_the_run_is_one_error_line(capsys):
    """The disk fills after the work is done: progress lines, then one error line, exit 2, no traceback."""
    argv = ["--env", "FrozenLake-v1", "--controllers", "fixed", "--seeds", "0:1", "--steps", "5200", "--backend", "host"]
    assert cli.main([*argv, "--markdown", "/dev/full"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == "study: error: cannot write /dev/full: No space left on device"
    assert lines[:-1] and all(ln.startswith("study: [1/1] FrozenLake-v1 × fixed") for ln in lines[:-1])


def test_controller_names_are_spelled_one_way(contract):
    assert controllers.expand(["const:1.0", "const:1", "ablation:seed+floor", "ablation:floor+seed", "fixed"],
                              contract) == [
        "const:1", "ablation:floor+seed", "fixed"]


@pytest.mark.slow
def test_full_preregistered_study(host, contract, prereg):
    """The pre-registered study as committed (minutes on a CPU; under a minute on the H200 with cupy)."""
    result = run_first(host, contract, prereg.envs, prereg.controllers, parse_seeds(prereg.seeds), prereg)
    assert result["as_preregistered"] and list(result["envs"]) == list(prereg.envs)
    _well_formed(result)


def test_section_rows_read_the_study(reduced):
    from analysis.present import study_section

    text = "\n".join(study_section.section(reduced))
    for env, block in reduced["envs"].items():
        for name, e in block["controllers"].items():
            row = next(line for line in text.splitlines() if line.startswith(f"| {env} | {name} |"))
            assert f"{e['collapse_fraction']:.1%} [{e['ci_low']:.1%}, {e['ci_high']:.1%}]" in row
    for name in study_section.FIGURES:
        assert f"]({name})" in text


# ---- the second study ----

@pytest.fixture(scope="module")
def prereg2():
    from repro.learning.study2 import load_prereg2

    return load_prereg2()


@pytest.fixture(scope="module")
def reduced2(host, contract, prereg2):
    from analysis.cli.study_runs import reduced_second

    return reduced_second(host, contract, prereg2)


def test_mcnemar_and_sign_test_against_closed_forms():
    """McNemar's exact test is the two-sided binomial test on the discordant pairs: 9 against 1 gives
    2·(1 + 10)/2^10; the sign test counts seeds."""
    from analysis.judge.study_stats import mcnemar, seed_sign_test

    a = np.array([1] * 9 + [0] * 1 + [1] * 5 + [0] * 5, bool)
    b = np.array([0] * 9 + [1] * 1 + [1] * 5 + [0] * 5, bool)
    m = mcnemar(a, b)
    assert (m["only_a"], m["only_b"], m["both"], m["n"]) == (9, 1, 5, 20)
    assert np.isclose(m["p"], 2 * (1 + 10) / 2**10)
    assert mcnemar(a, a)["p"] == 1.0
    s = seed_sign_test(np.array([[1, 1, 0], [1, 0, 0]], bool), np.array([[0, 1, 1], [0, 0, 1]], bool))
    assert (s["seeds_a_more"], s["seeds_b_more"]) == (1, 1) and s["p"] == 1.0


def test_closed_forms_equal_scipys_binomtest():
    """The second study's exact p-values and Clopper–Pearson intervals against scipy's binomtest itself (which
    finds the interval's bounds by a root search, to about 1e-9 relative: the beta quantiles are the definition)."""
    from scipy.stats import binomtest

    from analysis.judge.study_stats import clopper_pearson, sign_p

    for x, y in [(0, 1), (1, 0), (3, 3), (9, 1), (151, 1), (124, 5), (19, 70), (0, 40), (250, 260)]:
        assert np.isclose(sign_p(x, y), binomtest(x, x + y, 0.5).pvalue, rtol=1e-9, atol=1e-300)
    for k, n in [(0, 100), (1, 100), (50, 100), (99, 100), (100, 100), (3, 3600), (811, 3600)]:
        ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
        assert np.allclose(clopper_pearson(k, n, 0.95), (ci.low, ci.high), rtol=1e-6, atol=1e-15)


def test_second_study_criteria_on_hand_made_traces(prereg2):
    """The three criteria on traces built by hand: K low evaluations in a row (not K − 1), the minimum's threshold,
    the signature's order (the λ side first)."""
    from dataclasses import replace as dc_replace

    from analysis.judge.second_study import verdicts

    c = dc_replace(prereg2.criteria, warmup=0, consecutive=3)
    E, N = 8, 4
    nan = np.full((E, N), np.nan)
    steps = np.arange(1, E + 1) * 200
    agree = np.full((E, N), 0.9)
    agree[2:5, 0] = 0.1  # run 0: three low evaluations in a row
    agree[2:4, 1] = 0.1  # run 1: two only
    agree[5:8, 2] = 0.1  # run 2: three at the end, after the λ side
    agree[0:3, 3] = 0.1  # run 3: three low, but the λ side comes after them
    log_min = np.zeros((E, N))
    log_min[4, 1] = -7
    quiet = np.zeros((E, N))
    quiet[4, 2] = 40
    quiet[6, 3] = 40
    traces = agent.Traces(steps, np.ones((E, N), np.float32), agree, log_min, nan, nan, agree, log_min, nan, agree,
                          log_min, agree, log_min, quiet)
    v = verdicts(traces, np.full((E, 1), 0.5), 1, N, c, quiet_steps=34)
    assert v["relative"].tolist() == [True, False, True, True]
    assert v["minimum"].tolist() == [False, True, False, False]
    assert v["signature"].tolist() == [False, False, True, False]
    assert v["relative_at_end"].tolist() == [False, False, True, False]


@pytest.mark.slow  # 2 s; the fast run holds its judgement on hand-made traces (above)
def test_reduced_second_study(reduced2, contract, prereg2):
    """The CI-sized second study: strict JSON, intervals around their fractions, verdicts that add up, pairs paired
    on the same runs, λ = 0 held, the bracket's sign kept, the incident's series as long as its steps."""
    from repro.learning.study2 import CRITERIA, signature_steps

    json.dumps(reduced2, allow_nan=False)
    for block in reduced2["envs"].values():
        P, ctrl = len(block["grid_points"]), block["controllers"]
        for e in ctrl.values():
            for crit in CRITERIA:
                c = e[crit]
                assert c["ci_low"] <= c["fraction"] <= c["ci_high"] and c["k"] == sum(c["verdicts"])
                assert c["k"] == c["persisting"] + c["recovered"] == sum(x["k"] for x in c["per_point"])
            assert e["signature"]["k"] <= min(e["relative"]["k"], e["lambda_side"]["k"])  # the signature needs both
        lam0 = ctrl["const:0"]["median_over_steps_per_regime"]["lam"]
        assert all(x == 0.0 for series in lam0 for x in series)
        for pair in block["pairs"]:
            a, b = (np.array(ctrl[pair[k]]["relative"]["verdicts"], bool) for k in ("a", "b"))
            pooled = pair["relative"]["pooled"]
            assert (pooled["only_a"], pooled["only_b"]) == (int((a & ~b).sum()), int((b & ~a).sum()))
        for row in block["brackets"]:
            gap = ctrl["const:1"]["final_agreement_median_per_point"][block["grid_points"].index(
                {k: row[k] for k in ("kl_site", "kl_before", "policy", "aux_reward")})] - \
                ctrl["const:0.001"]["final_agreement_median_per_point"][block["grid_points"].index(
                    {k: row[k] for k in ("kl_site", "kl_before", "policy", "aux_reward")})]
            assert np.isclose(row["agree_gap"], gap, atol=1e-6)
            assert not (row["wide"] and not row["separated"] and gap < prereg2.criteria.bracket_min_agreement_gap)
        assert len(block["regimes"]) * len(block["regimes"][0]["points"]) == P
    inc = reduced2["incident"]
    assert all(len(s["lam"]) == len(inc["steps"]) for s in inc["series"].values())
    # the original from its cold start: seeded λ decays to its floor in the contract's steps-to-floor (±1)
    lam = np.array(inc["series"]["original"]["lam"], dtype=np.float32)
    floor = np.float32(contract.controller("original").value("floor"))
    first = int(np.argmax(lam <= floor)) + 1
    assert abs(first - signature_steps(prereg2, contract)) <= 1


@pytest.mark.slow  # the reduced second study on both backends
@pytest.mark.device_only
def test_second_study_backends_agree_bit_for_bit(backend, host, contract, prereg2):
    """The second study's loop on the GPU and the CPU: the same JSON bit for bit, apart from the backend's name."""
    from analysis.cli.study_runs import run_second

    grid = {"kl_site": ("replay", "even"), "kl_before": (0, 1), "policy": ("view:4", "linear"), "aux_reward": (1.0,)}
    args = dict(envs=["FrozenLake-v1", "CliffWalking-v1"], names=["fixed", "original", "const:0", "const:0.001",
                                                                  "const:1", "ablation:floor"],
                seeds=parse_seeds("0:3"), grid=grid, steps=7800, incident_steps=600)
    ours, ref = run_second(backend, contract, prereg2, **args), run_second(host, contract, prereg2, **args)
    assert ours.pop("backend") == backend.name and ref.pop("backend") == "host"
    assert json.dumps(ours) == json.dumps(ref)


@pytest.mark.slow  # a reduced second study through the CLI (2 s)
def test_second_study_cli(tmp_path, capsys):
    out = tmp_path / "s2.json"
    assert cli.main(["--second", "--env", "FrozenLake-v1", "--controllers", "fixed,original,const:0", "--seeds", "0:2",
                     "--steps", "5200", "--backend", "host", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["as_preregistered"] is False and set(data["envs"]["FrozenLake-v1"]["controllers"]) == {
        "fixed", "original", "const:0"}
    assert cli.main(["--second", "--controllers", "fixed,original", "--steps", "5200", "--backend", "host"]) == 2
    assert "baseline const:0" in capsys.readouterr().err
