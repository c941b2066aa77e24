"""The closed-loop toy with the real kernels: the collapse, its absence, and the batched stepper."""

from __future__ import annotations

import json

import numpy as np
import pytest

from analysis.cli.toy import main
from repro import toy as closed_loop
from repro.core.grid import combinations
from repro.toy import COLLAPSE, Toy, run_toy

SMALL_GRID = {"actor_lr": (0.5,), "kl_ema_rate": (0.01,), "kl_target": (1.0,)}


def subject(backend, contract, name, source=None):
    return closed_loop.compile_subject(backend, source or contract.source(name), contract.slots,
                                       contract.controller(name).value("seed_lambda"))


@pytest.fixture(scope="module")
def runs(backend, contract):
    return {n: closed_loop.one_run(backend, n, subject(backend, contract, n)) for n in ("original", "fixed")}


def test_original_collapses(contract, runs):
    """λ reaches the original's floor within its documented steps, and agreement falls below the collapse line."""
    r, entry = runs["original"], contract.controller("original")
    documented = entry["steps_to_floor"]
    assert r["lambda_min"] == np.float32(entry.value("floor"))
    assert r["steps_to_lambda_floor"] <= documented.value + documented.tolerance
    assert r["q_pi_agree_min"] < COLLAPSE and r["collapsed"]


def test_fixed_holds_the_coupling(contract, runs):
    r, entry = runs["fixed"], contract.controller("fixed")
    assert r["settled_floor"] == np.float32(entry.value("floor")), "measured floor under aligned KL"
    assert not r["collapsed"]
    assert r["q_pi_agree_min_after_warmup"] >= 0.5, f"after {r['parameters']['warmup']} warm-up steps"


def per_step_stepper(groups, base):
    """One launch per run per step on a host copy of the ISV: the production pattern, run for run."""

    def step(isv):
        xp = np if isinstance(isv, np.ndarray) else __import__("cupy")
        host = isv if xp is np else xp.asnumpy(isv)
        slots = groups[0].kernel.slots
        for r in range(host.shape[0]):
            _, row = groups[r // base].kernel.run_per_step(host[r], host[r : r + 1, slots.kl],
                                                           host[r : r + 1, slots.target])
            host[r] = row
        isv[...] = xp.asarray(host)

    return step


def test_batched_stepper_is_bit_identical_to_per_step_launches(backend, contract):
    groups = [subject(backend, contract, n) for n in ("original", "fixed")]
    toy, seeds = Toy(steps=120), 3
    batched = run_toy(backend, groups, toy, seeds=seeds, trace=True)
    per_step = run_toy(backend, groups, toy, seeds=seeds, trace=True, stepper=per_step_stepper(groups, seeds))
    for a, b in zip(batched, per_step, strict=True):
        for field in ("lambda_min", "lambda_max", "lambda_final", "log10_q_pi_agree_min", "steps_to_lambda_floor"):
            assert np.array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field))), field
    assert batched[0].trace == per_step[0].trace


def _host_only(backend) -> None:
    if backend.xp is not np:
        pytest.skip(f"run_toy splits the subjects over threads on the host only ({backend.name}: one batch)")


def test_subjects_split_over_threads_give_the_bits_of_one_batch(backend, contract, monkeypatch):
    """The host runs shares of the subjects in threads: every subject's runs come out as in one batch, any split."""
    from repro.toy import model

    _host_only(backend)

    groups = [subject(backend, contract, n) for n in ("original", "fixed", "original")]
    toy, seeds, grid = Toy(steps=150), 2, combinations({**SMALL_GRID, "kl_target": (0.3, 1.0)})
    monkeypatch.setattr(model, "_shares", lambda n: 1)
    whole = run_toy(backend, groups, toy, seeds=seeds, grid=grid, trace=True)
    monkeypatch.setattr(model, "_shares", lambda n: n)
    split = run_toy(backend, groups, toy, seeds=seeds, grid=grid, trace=True)
    for a, b in zip(whole, split, strict=True):
        for field in ("lambda_min", "lambda_max", "lambda_final", "log10_q_pi_agree_min", "q_pi_agree_final",
                      "steps_to_lambda_floor"):
            assert np.array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field))), field
    assert whole[0].trace == split[0].trace and whole[0].trace is not None


def test_an_interrupt_ends_every_share_within_a_step(backend, contract, monkeypatch):
    """Ctrl-C while the shares run: run_toy raises at once and the other shares stop before their next step, rather
    than finishing a run that would take about 10 minutes here (the with-block waits for its threads)."""
    import time

    from repro.toy import model

    _host_only(backend)
    real = model._run_batch

    def first_share_interrupted(*args):
        if args[-2] is not None:  # share 0 gets the progress callback: the user presses Ctrl-C there
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(model, "_shares", lambda n: n)
    monkeypatch.setattr(model, "_run_batch", first_share_interrupted)
    groups = [subject(backend, contract, n) for n in ("original", "fixed")]
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_toy(backend, groups, Toy(steps=10**7), seeds=1, progress=lambda t: None)
    # one step of 2 runs takes well under a millisecond; 60 s leaves a loaded machine 10^4 times that
    assert time.monotonic() - start < 60


@pytest.mark.slow_on_host  # 1.8 s, 16 variants compiled; the report's ablation (slow) runs the full one
def test_reduced_ablation(contract, backend):
    fixed, orig = contract.controller("fixed"), contract.controller("original")
    table = closed_loop.ablation(backend, contract.source("original"), contract.slots, orig, fixed, Toy(steps=400),
                                 seeds=4, grid=SMALL_GRID)
    assert len(table) == 16 and table.variant.is_unique
    # the overridden #define shows in behaviour: with the floor fix, λ never goes below the fixed floor
    assert (table[table.floor.astype(bool)].median_lambda_min >= np.float32(fixed.value("floor"))).all()
    plain = table[table.variant == "original"].iloc[0]
    assert plain.median_lambda_min == np.float32(orig.value("floor"))
    # the all-four variant is the fixed kernel's behaviour (same constants), run for run
    all_four = table[table.variant == "fixed (all four)"].iloc[0]
    direct = run_toy(backend, [subject(backend, contract, "fixed")], Toy(steps=400), seeds=4,
                      grid=combinations(SMALL_GRID))[0]
    assert all_four.collapse_fraction == direct.collapsed.mean()
    assert all_four.median_log10_q_pi_agree_min == np.median(direct.log10_q_pi_agree_min)


def test_same_seed_same_outcome(backend, contract):
    runs = [closed_loop.one_run(backend, "fixed", subject(backend, contract, "fixed"), Toy(steps=200), seed=3)
            for _ in range(2)]
    assert runs[0]["trace"] == runs[1]["trace"]


def _not_json(constant: str):
    raise AssertionError(f"{constant} is not JSON (a strict parser refuses it)")


@pytest.mark.slow  # 1.4 s (the plot); the CLI runs a candidate in the fast run below
def test_cli(tmp_path, capsys):
    out, plot = tmp_path / "r.json", tmp_path / "r.png"
    assert main(["--controller", "original", "--backend", "host", "--steps", "300", "--json", str(out),
                 "--plot", str(plot)]) == 0
    data = json.loads(out.read_text(), parse_constant=_not_json)  # strict: 300 steps end before the warm-up
    for key in ("lambda_min", "lambda_final", "q_pi_agree_min", "q_pi_agree_final", "steps_to_lambda_floor",
                "parameters"):
        assert key in data
    assert data["q_pi_agree_min_after_warmup"] is None  # no step after the warm-up: undefined, not inf
    assert data["parameters"]["steps"] == 300 and plot.read_bytes()[:4] == b"\x89PNG"


def test_cli_runs_a_candidate(contract, tmp_path):
    raised = 0.2
    path = tmp_path / "floor_raised.cu"
    path.write_text(contract.source("fixed").with_defines(MIN_LAMBDA=raised).text)
    out = tmp_path / "r.json"
    assert main(["--controller", "fixed", "--kernel", str(path), "--backend", "host", "--steps", "300",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["kernel"] == str(path) and data["lambda_min"] >= np.float32(raised)


@pytest.mark.parametrize("args, message", [
    (["--controller", "nope"], "unknown contract 'nope'"),
    (["--controller", "fixed", "--steps", "0"], "--steps must be at least 1"),
    (["--controller", "fixed", "--kernel", "/nonexistent/k.cu"], "kernel file not found"),
    (["--controller", "fixed", "--json", "/proc/no/such/dir/r.json"], "--json /proc/no/such/dir/r.json: cannot be written"),
])
def test_cli_bad_input_exits_2_in_one_line(args, message, capsys):
    assert main([*args, "--backend", "host"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
