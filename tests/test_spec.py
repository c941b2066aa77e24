"""The spec model against its own closed forms, and against the rule's description step by step."""

from __future__ import annotations

import numpy as np
import pytest

from repro.core import spec
from repro.core.f32 import F32


@pytest.mark.parametrize("controller", ["fixed", "original"])
def test_simulated_doubling_and_halving_match_closed_form(contract, controller):
    entry = contract.controller(controller)
    rule = spec.Rule.of(entry)
    up = spec.run(rule, [entry.value("floor")], np.full((200, 1), 1e3, F32), F32(1.0))[:, 0]
    assert int(np.argmax(up >= 2 * F32(entry.value("floor")))) + 1 == spec.steps_to_double(entry.value("ramp"))
    down = spec.run(rule, [entry.value("ceiling")], np.full((3000, 1), 1e-6, F32), F32(1.0))[:, 0]
    assert int(np.argmax(down <= 0.5)) + 1 == spec.steps_to_halve(entry.value("decay"))


@pytest.mark.parametrize("controller", ["fixed", "original"])
def test_simulated_steps_to_floor_match_closed_form(contract, controller):
    entry = contract.controller(controller)
    rule = spec.Rule.of(entry)
    lam = spec.run(rule, [entry.value("seed_lambda")], np.full((3000, 1), 1e-6, F32), F32(1.0))[:, 0]
    first = int(np.argmax(lam == rule.floor)) + 1
    assert first == spec.steps_to_floor(entry.value("seed_lambda"), entry.value("floor"), entry.value("decay"))


def test_one_step_follows_the_description():
    rule = spec.Rule(F32(0.05), F32(1.0), F32(3.0), F32(1.2), F32(0.998))
    t = F32(0.02)
    assert spec.step(rule, F32(0.5), F32(0.07), t) == F32(F32(0.5) * F32(1.2))  # above 3·t: ramp
    assert spec.step(rule, F32(0.5), F32(0.006), t) == F32(F32(0.5) * F32(0.998))  # below t/3: decay
    assert spec.step(rule, F32(0.5), F32(0.06), t) == F32(0.5)  # fl(3·t) itself: hold
    assert spec.step(rule, F32(0.9), F32(1.0), t) == F32(1.0)  # clamped at the ceiling
    assert spec.step(rule, F32(0.0501), F32(1e-9), t) == F32(0.05)  # clamped at the floor
    assert spec.step(rule, F32(0.5), F32(-1.0), t) == F32(0.5)  # guard


@pytest.mark.parametrize("sigma", [0.25, 0.5, 1.0, 1.5])
@pytest.mark.parametrize("tol", [1.5, 3.0])
def test_in_band_probability_matches_monte_carlo(sigma, tol):
    rng = np.random.default_rng(0)
    z = np.exp(sigma * rng.standard_normal(200_000))
    measured = np.mean((z >= 1 / tol) & (z <= tol))
    assert measured == pytest.approx(spec.in_band_probability(tol, sigma), abs=0.005)


@pytest.mark.parametrize("controller", ["fixed", "original"])
def test_closed_forms_give_the_documented_counts(contract, controller):
    """The commit's "4 steps to double" and "347 steps to halve" follow from its documented rates."""
    entry = contract.controller(controller)
    assert spec.steps_to_double(entry.value("ramp")) == entry.value("steps_to_double")
    assert spec.steps_to_halve(entry.value("decay")) == entry.value("steps_to_halve")


def test_closed_forms():
    assert spec.in_band_probability(3.0, 0.0) == 1.0
    assert spec.decay_to_ramp_log_ratio(1.2, 1 / 1.2) == pytest.approx(1.0)


def test_runs_as_columns_equal_each_run_alone(contract):
    """spec.run_each pads ragged runs into one run: every column must equal its own run, bit for bit, for every
    contract entry, with NaN, ±inf, zero and negative inputs among them."""
    rng = np.random.default_rng(7)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e-40], dtype=F32)
    for name, entry in contract.controllers.items():
        rule = spec.Rule.of(entry)
        runs = []
        for length in (0, 1, 4, 37, 200):
            kl = (0.1 * np.exp(2 * rng.standard_normal(length))).astype(F32)
            kl[rng.random(length) < 0.1] = rng.choice(specials)
            target = np.where(rng.random(length) < 0.05, rng.choice(specials), F32(0.1)).astype(F32)
            runs.append((F32(rng.choice([0.1, 0.5, 0.0, np.nan])), kl, target))
        for (lam0, kl, target), got in zip(runs, spec.run_each(rule, runs), strict=True):
            alone = spec.run(rule, [lam0], kl[:, None], target[:, None])[:, 0]
            assert got.view(np.uint32).tolist() == alone.view(np.uint32).tolist(), name


def test_a_run_equals_its_steps_one_by_one(contract):
    """spec.run skips the steps that repeat the last inputs where λ did not move: it must equal spec.step applied
    step by step, bit for bit, on inputs with long constant stretches (clamps and fixed points), NaN among them."""
    rng = np.random.default_rng(11)
    levels = np.array([1e-4, 0.1, 0.5, 10.0, np.nan, 0.0], dtype=F32)
    kl = np.repeat(rng.choice(levels, 12), rng.integers(1, 80, 12)).astype(F32)[:, None]
    target = np.full_like(kl, 0.1)
    for name, entry in contract.controllers.items():
        if entry.stateful:  # one step or a settling point needs the state too: tests/test_stateful_peers.py
            continue
        rule = spec.Rule.of(entry)
        for lam0 in (F32(0.1), F32(np.nan)):
            got = spec.run(rule, [lam0], kl, target)[:, 0]
            lam, want = lam0, []
            for t in range(len(kl)):
                lam = spec.step(rule, lam, kl[t, 0], target[t, 0])
                want.append(lam)
            assert got.view(np.uint32).tolist() == np.array(want, dtype=F32).view(np.uint32).tolist(), (name, lam0)


def test_settling_equals_a_run_to_where_it_settles(contract):
    """spec.settling takes a shortcut for the proportional rule (one multiplier for constant inputs): for every
    contract entry it must equal spec.run (held to spec.step above) up to the first step that leaves λ at 0 or
    unchanged, bit for bit, NaN, ±inf, 0 and negative inputs among them (both capped at 200 steps)."""
    cap = 200
    cases = [(F32(lam0), F32(kl), F32(target)) for lam0 in (0.2, 1e-44, np.nan, -1.0)
             for kl in (0.1, 1e-3, 10.0, np.nan, np.inf, -1.0) for target in (0.1, np.nan)]
    lam0, kl, target = (np.array(c, dtype=F32) for c in zip(*cases, strict=True))
    for name, entry in contract.controllers.items():
        if entry.stateful:  # one step or a settling point needs the state too: tests/test_stateful_peers.py
            continue
        rule = spec.Rule.of(entry)
        lam = spec.run(rule, lam0, np.tile(kl, (cap, 1)), np.tile(target, (cap, 1)))
        before = np.vstack([lam0[None], lam[:-1]])
        stops = (lam == 0) | (lam.view(np.uint32) == before.view(np.uint32))
        for j, case in enumerate(cases):
            n = int(np.argmax(stops[:, j])) + 1 if stops[:, j].any() else cap
            got = spec.settling(rule, *case, cap=cap)
            assert got.view(np.uint32).tolist() == lam[:n, j].view(np.uint32).tolist(), (name, case)
