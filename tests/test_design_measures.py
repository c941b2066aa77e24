"""The design measures (issue 35) on synthetic λ trajectories with known answers, the cold-start scenarios
against the spec model, the half-loss bisection against a sweep of the kernel, and the report's section over
every contract entry."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.judge import design_measures as dm
from repro.core import spec
from repro.core.f32 import F32
from repro.runners import design_runs
from repro.runners.runner import run_scenarios
from repro.runners.scenarios import REF_TARGET, WARM_UP_LEVEL, WARM_UP_RATES, catalogue, ema_from_zero, warm_up, warm_up_steps


def geometric(lam0: float, factor: float, n: int, cap: float) -> np.ndarray:
    """λ·factor^t clamped at ``cap``: a pure step response (float32)."""
    return np.minimum(lam0 * factor ** np.arange(1, n + 1, dtype=np.float64), cap).astype(F32)


def test_step_response_of_a_geometric_ramp_to_a_clamp():
    # λ from 1 ×2 per step, clamped at 2^25 from step 25: ln λ / ln 2^25 = t/25 (no threshold falls on a step)
    lam = np.concatenate([np.ones(5, F32), geometric(1.0, 2.0, 60, 2.0 ** 25)])
    s = dm.step_response(lam, 5, 1.0)
    # 10 % first reached at t = 3, 90 % at t = 23: 20 steps; outside 2 % last at t = 24
    assert (s.rise, s.overshoot, s.settling, s.final) == (20, 0.0, 24, 2.0 ** 25)


def test_step_response_overshoot_and_settling_of_a_known_curve():
    # ln λ: 0 → 2 at step 1, then 1 from step 4 on: overshoot 100 % of the change, settled from step 4
    y = np.array([2.0, 1.5, 1.2, 1.0, 1.0, 1.0])
    s = dm.step_response(np.exp(y).astype(np.float64), 0, 1.0)
    assert s.rise == 0 and s.overshoot == pytest.approx(1.0) and s.settling == 3


def test_step_response_not_defined_where_lambda_still_moves_or_holds():
    assert dm.step_response(geometric(1.0, 2.0, 20, np.inf), 0, 1.0).rise is None
    held = dm.step_response(np.ones(10, F32), 3, 1.0)
    assert held.rise is None and held.settling == 0 and "does not respond" in held.why


def test_cycle_of_a_sawtooth_and_of_a_constant():
    period = 40
    saw = np.tile(np.concatenate([1.1 ** np.arange(20), 1.1 ** np.arange(20, 0, -1)]), 10)
    c = dm.cycle(saw)
    assert c.period == period and c.amplitude == pytest.approx(1.1 ** 20, rel=1e-9)
    assert dm.cycle(np.full(100, 0.3)).period is None and dm.cycle(np.full(100, 0.3)).amplitude == 1.0


def test_cycle_of_a_slow_wander_has_no_period():
    walk = np.exp(np.cumsum(np.random.default_rng(0).standard_normal(2000) * 0.001) + np.linspace(0, 1, 2000) ** 3)
    c = dm.cycle(walk)
    assert c.period is None or c.period > 100


def test_share_at_a_bound_is_bitwise():
    lam = np.array([0.05, 0.05, np.nextafter(F32(0.05), F32(1)), 0.2], dtype=F32)
    assert dm.share_at(lam, 0.05) == 0.5 and dm.share_at(lam, None) is None


def test_warm_up_of_a_known_trajectory():
    lam = np.array([1.0, 0.5, 0.25, 0.25, 0.5, 1.0, 1.0], dtype=F32)
    w = dm.warm_up(lam, 1.0, restart=1, warm_steps=3, floor=0.25)
    # from the restart: 0.5 0.25 0.25 0.5 1 1; λ after 3 steps 0.25; lowest first at its step 2; back at 1 3 later
    assert (w.before, w.after, w.lowest, w.lowest_step, w.at_floor, w.recovery, w.steps) == (1.0, 0.25, 0.25, 2, 2, 3, 6)
    assert w.loss == 0.75
    assert dm.warm_up(np.ones(4, F32), 1.0).recovery == 0


def test_ema_from_zero_is_the_ema_recurrence():
    a, level = 0.01, 0.022
    e, want = 0.0, []
    for _ in range(500):
        e = (1 - a) * e + a * level
        want.append(e)
    np.testing.assert_allclose(ema_from_zero(a, level, 500), np.array(want, dtype=F32), rtol=1e-6)
    assert warm_up_steps(a) == math.ceil(math.log(100) / -math.log(1 - a))


@pytest.mark.parametrize("name", ["fixed", "original", "ziegler"])
def test_cold_starts_in_the_catalogue_follow_the_spec_model(contract, host, name):
    """The kernel on every cold start and resume of the catalogue, bit for bit against the documented rule."""
    ctrl = contract.controller(name)
    scenarios = [s for s in catalogue(ctrl) if s.family in ("warm_up", "resume")]
    assert {s.params.get("alpha") for s in scenarios if s.family == "warm_up"} == set(WARM_UP_RATES)
    runs = run_scenarios(host.compile(contract.source(name), contract.slots), scenarios)
    want = spec.run_each(spec.Rule.of(ctrl), [(s.lambda0, s.kl, s.target) for s in scenarios])
    for r, w in zip(runs, want, strict=True):
        assert np.array_equal(r.lam.view(np.uint32), w.view(np.uint32)), r.scenario.name


def test_the_fixed_warm_up_loses_what_its_decay_and_dead_zone_say(contract, host):
    """λ after a cold start at rate 0.01: the seed × decay^(steps the EMA spends below target/tol), as the spec
    model counts them on the same float32 trace."""
    ctrl = contract.controller("fixed")
    sc = warm_up(ctrl, 0.01)
    run = run_scenarios(host.compile(contract.source("fixed"), contract.slots), [sc])[0]
    below = int((sc.kl < spec.band_edges(REF_TARGET, ctrl.value("tolerance"))["lower"]).sum())
    w = dm.warm_up(run.lam, sc.lambda0, 0, sc.params["warm_up_steps"], ctrl.bound("floor"))
    lam = F32(sc.lambda0)
    for _ in range(below):
        lam = max(F32(lam * F32(ctrl.value("decay"))), F32(ctrl.value("floor")))
    assert w.after == float(lam) and w.recovery is None and w.at_floor == 0
    assert 1 - w.after / w.before <= ctrl.value("warm_up_loss")


@pytest.mark.parametrize("name", ["fixed", "ziegler"])
def test_half_loss_rate_brackets_the_change_in_a_sweep(contract, host, name):
    """The bisection's rate loses half, the rate just above it does not, and a sweep of the kernel agrees."""
    ctrl = contract.controller(name)
    kernel = host.compile(contract.source(name), contract.slots)
    h = design_runs.half_loss_rate(kernel, ctrl)
    assert h.rate is not None and h.above is not None and h.above / h.rate < 1.01
    rates = [h.rate / 2, h.rate, h.above, min(2 * h.above, 0.9)]
    runs = [run_scenarios(kernel, [warm_up(ctrl, a, WARM_UP_LEVEL, warm_up_steps(a))])[0] for a in rates]
    lost = [design_runs.lambda_after_warm_up(r) <= design_runs.HALF * float(r.scenario.lambda0) for r in runs]
    assert lost == [True, True, False, False]


def test_a_loss_not_monotone_in_the_rate_is_said_not_bisected():
    """Where a slower EMA keeps more than half while a faster one loses it, no single rate is the half-loss
    rate: the bisection's bracket (it assumed a slower EMA costs at least as much) is replaced by the two rates."""
    h = design_runs.HalfLossRate(None, 1e-4, 2, "keeps more than half even at rate 0.0001")
    out = dm.checked_against_sweep(h, [1e-1, 1e-3, 1e-2], [0.9, 2.6, 0.26])
    assert (out.rate, out.above, out.monotone) == (None, None, False)
    assert out.why == "not monotone in the rate: loses half at 0.01, keeps 260% at 0.001"
    monotone = design_runs.HalfLossRate(0.003, 0.004, 16)
    assert dm.checked_against_sweep(monotone, [1e-3, 1e-2, 1e-1], [0.2, 0.7, 0.99]) is monotone


def test_the_pid_lagrangians_cold_start_loss_is_not_monotone_in_the_rate(contract, host):
    """Measured: the PID Lagrangian's integral overshoots after a slow warm-up, so its sweep keeps more than half
    at a slower rate than one where it loses half; the section says "not monotone" rather than a rate."""
    name = "pid_lagrangian"
    ctrl = contract.controller(name)
    kernel = host.compile(contract.source(name), contract.slots_of(name))
    rates, kept = dm.kept_after_warm_up(design_runs.sweep(kernel, ctrl))
    order = np.argsort(rates)
    kept = np.asarray(kept)[order]
    loses = np.flatnonzero(kept <= design_runs.HALF)
    assert loses.size and (kept[: loses[-1]] > design_runs.HALF).any(), kept
    judged = dm.checked_against_sweep(design_runs.half_loss_rate(kernel, ctrl), np.asarray(rates)[order], kept)
    assert not judged.monotone and judged.rate is None


class _Catalogue:
    """What the section reads of a controller's evidence: its entry and its catalogue runs."""

    def __init__(self, controller, runs):
        self.controller, self.catalogue = controller, runs

    def run(self, name):
        return next(r for r in self.catalogue if r.scenario.name == name)


def test_every_contract_entry_is_a_row_and_a_line(contract, host):
    """The section iterates over what it is handed: every contract entry (a new one too) gets a row of both
    tables and a line of every panel and curve (catalogue runs in one looped call each; a made-up toy trace)."""
    from analysis.present import design_section

    names = ["fixed", "original", *contract.peers()]
    ev, half, sweeps, toy = {}, {}, {}, {}
    for n in names:
        ctrl = contract.controller(n)
        kernel = host.compile(contract.source(n), contract.slots)
        ev[n] = _Catalogue(ctrl, run_scenarios(kernel, [s for s in catalogue(ctrl) if s.family != "bad_values"]))
        half[n] = design_runs.half_loss_rate(kernel, ctrl, steps=1)
        sweeps[n] = design_runs.sweep(kernel, ctrl, rates=(0.01, 0.1))
        toy[n] = np.full(50, ctrl.value("seed_lambda"), dtype=F32)
    section = dm.section(ev, half, sweeps, toy)
    text = "\n".join(design_section.markdown(section.warm_ups, section.designs, design_section.rates_note(section)))
    rows = text.splitlines()
    for n in names:
        assert f"| {n} | warm_up_a0.01 |" in text and f"| {n} | resume_lambda_reset |" in text
        assert sum(line.startswith(f"| {n} | ") for line in rows) == 6  # five cold starts and resumes, one measures row
    assert list(section.curves) == names and all(list(p) == names for p in section.panels.values())
    assert set(design_section.data(section)) == {"warm_up.csv", "warm_up_sweep.csv", "design_measures.csv"}


@pytest.mark.slow  # every contract entry gathered in full and run in the toy (6 s); the test above is the fast one
def test_the_section_covers_every_contract_entry(contract, host):
    """Every contract entry gets a row of both tables and a line of both figures: a new entry is picked up."""
    from analysis.present import design_section
    from repro.runners.gather import gather
    from repro.toy import Toy, compile_subject, one_run

    names = ["fixed", "original", *contract.peers()]
    ev, half, sweeps, toy = {}, {}, {}, {}
    for n in names:
        ctrl = contract.controller(n)
        ev[n] = gather(host, contract.source(n), contract.slots, ctrl, static=False, coverage=False, isolate=False)
        kernel = host.compile(contract.source(n), contract.slots)
        half[n] = design_runs.half_loss_rate(kernel, ctrl, steps=2)
        sweeps[n] = design_runs.sweep(kernel, ctrl, rates=(0.01, 0.1))
        subject = compile_subject(host, contract.source(n), contract.slots, ctrl.value("seed_lambda"))
        toy[n] = one_run(host, n, subject, Toy(steps=100, warmup=10))["trace"]["lambda"]
    section = dm.section(ev, half, sweeps, toy)
    text = "\n".join(design_section.markdown(section.warm_ups, section.designs, design_section.rates_note(section)))
    for n in names:
        assert f"| {n} | warm_up_a0.01 |" in text and any(line.startswith(f"| {n} | ") for line in text.splitlines())
    assert list(section.curves) == names and all(list(p) == names for p in section.panels.values())
    assert set(design_section.data(section)) == {"warm_up.csv", "warm_up_sweep.csv", "design_measures.csv"}
