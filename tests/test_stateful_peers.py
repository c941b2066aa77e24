"""The stateful peers (kernels/peers/pid_lagrangian.cu, geco.cu) against their sources and the spec model.

Literal cases are worked out by hand from the cited source lines (rlpyt's CppoPID.optimize_agent in Python
floats; genesis's GECO.loss in float32 tensors) with the contract's defaults; the gains are overridden where a
case needs a term the defaults switch off (K_P = K_D = 0 in rlpyt). Neither source has unit tests of its own for
these updates (rlpyt has none for cppo_pid.py; genesis has no tests). A transcription of rlpyt's update with its
deque, in double throughout, bounds what the float32 state slots cost. Every case runs through the kernel one
launch per step and looped, compared bit for bit (a NaN with a NaN).
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest

from repro.core import stateful
from repro.core.f32 import F32, differs_beyond_nan
from repro.core.isv import new_isv, stray_writes

NAN = float("nan")
PID = ("astooke/rlpyt 2f2126f rlpyt/projects/safe/cppo_pid.py CppoPID.optimize_agent: delta = ep_cost_avg - "
       "cost_limit; pid_i = max(0., pid_i + delta * Ki); cost_penalty = max(0., Kp * delta_p + pid_i + Kd * pid_d)")
GECO = ("applied-ai-lab/genesis 4483dfb utils/geco.py GECO.loss: err_ema = err (first), else (1-α)·err + α·err_ema; "
        "factor = exp(s·step·(goal - err_ema)); β = clamp(β·factor) — here λ = 1/β: λ/factor")


@pytest.fixture(scope="module")
def compiled(contract, backend):
    kernels = {}

    def get(name: str, **defines):
        key = (name, tuple(sorted(defines.items())))
        if key not in kernels:
            source = contract.source(name)
            kernels[key] = backend.compile(source.with_defines(**defines) if defines else source,
                                           contract.slots_of(name))
        return kernels[key]

    return get


def _runs(kernel, lam0, kl, target):
    """λ after each step, one launch per step and looped (the state slots seeded by the harness)."""
    kl = np.asarray(kl, dtype=F32)
    tg = np.full(kl.shape, target, dtype=F32)
    per_step, _ = kernel.run_per_step(new_isv(kernel.slots, [lam0])[0], kl, tg)
    looped, isv = kernel.run_looped(new_isv(kernel.slots, [lam0]), kl[:, None], tg[:, None])
    return {"per_step": per_step, "looped": looped[:, 0]}, isv


# (peer, name, defines, λ0, KL trace, target, λ after each step, the source's decision by hand)
CASES = [
    ("pid_lagrangian", "integral: one step above the limit", {}, 1.0, (0.5,), 0.25, (1.25,),
     "Ki = 1: pid_i = max(0., 1 + (0.5 - 0.25)·1) = 1.25; Kp = Kd = 0: cost_penalty = 1.25 (exact in binary)"),
    ("pid_lagrangian", "anti-windup: the integral is projected at 0 and recovers at once", {}, 1.0,
     (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5), 0.25, (0.75, 0.5, 0.25, 0.0, 0.0, 0.0, 0.25),
     "pid_i = max(0., pid_i − 0.25) reaches 0. and stays (no negative windup); KL 0.5 gives 0 + 0.25 at once"),
    ("pid_lagrangian", "a NaN KL zeroes the integral and, kept in the proportional EMA, λ for good", {}, 1.0,
     (0.5, NAN, 0.5, 0.5), 0.25, (1.25, 0.0, 0.0, 0.0),
     "max(0., NaN) = 0. (Python keeps 0. unless x > 0.); _delta_p stays NaN, Kp·NaN = NaN, max(0., NaN) = 0."),
    ("pid_lagrangian", "the proportional term: the EMA'd error times K_P", {"PID_KP": "4.0"}, 1.0, (0.0,), 0.25,
     (F32(4.0 * ((1 - 0.95) * -0.25) + 0.75),),
     "pid_i = max(0., 1 − 0.25) = 0.75; _delta_p = 0·0.95 + (1 − 0.95)·(−0.25) (1 − 0.95 = 0.050000000000000044 in "
     "double); 4·_delta_p + 0.75 = 0.7000000000000002 → fl32"),
    ("pid_lagrangian", "λ ≥ 0: a negative output is projected at 0", {"PID_KP": "100.0"}, 1.0, (0.0,), 0.25, (0.0,),
     "pid_i = 0.75; 100·(1 − 0.95)·(−0.25) + 0.75 = −0.5 → cost_penalty = max(0., −0.5) = 0."),
    ("geco", "the first update takes the KL itself; the constraint met speeds λ's fall", {}, 1.0, (0.0,), 0.5,
     (F32(1.0) / F32(math.exp(float(F32(F32(10 * 1e-5) * F32(0.5))))),),
     "err_ema = 0 (None: err); constraint = 0.5 − 0 > 0: factor = exp(fl32(10·1e-5)·0.5); λ = 1/factor"),
    ("geco", "λ at the ceiling 1/β_min stays there", {}, 1e10, (1.0,), 0.5, (F32(1e10),),
     "constraint −0.5: λ/exp(−5e-6) > 1e10 → clamp(…, 1e-10, 1e10) = fl32(1e10)"),
    ("geco", "λ at the floor 1/β_max stays there", {}, 1e-10, (0.0,), 0.5, (F32(1e-10),),
     "constraint 0.5 > 0: λ/exp(5e-5) < 1e-10 → clamp = fl32(1e-10)"),
    ("geco", "a NaN KL enters the EMA and passes through the clamp", {}, 1.0, (NAN, 0.0), 0.5, (NAN, NAN),
     "err_ema = NaN, constraint NaN, factor NaN, λ NaN; torch.clamp passes a NaN; the EMA keeps it"),
]

@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_stateful_peer_reproduces_its_source_case(compiled, case):
    peer, _, defines, lam0, kl, target, expected, why = case
    runs, _ = _runs(compiled(peer, **defines), lam0, kl, target)
    for mode, lam in runs.items():
        assert not differs_beyond_nan(lam, np.asarray(expected, dtype=F32)).any(), \
            f"{mode}: {lam} ≠ {expected} ({why}; {PID if peer == 'pid_lagrangian' else GECO})"


def _rlpyt(kl, target, kp, ki, kd, delay, a_p, a_d, penalty_init):
    """rlpyt's CppoPID update transcribed line by line, in Python floats, with its deque (no float32 state)."""
    pid_i, delta_p, cost_d, cost_ds, out = penalty_init, 0.0, 0.0, collections.deque([0.0], maxlen=delay), []
    for ep_cost_avg in kl:
        delta = float(ep_cost_avg - target)
        pid_i = max(0., pid_i + delta * ki)
        delta_p *= a_p
        delta_p += (1 - a_p) * delta
        cost_d *= a_d
        cost_d += (1 - a_d) * float(ep_cost_avg)
        pid_d = max(0., cost_d - cost_ds[0])
        out.append(max(0., kp * delta_p + pid_i + kd * pid_d))
        cost_ds.append(cost_d)
    return np.array(out)


def test_pid_delay_line_and_gains_follow_rlpyt_within_float32_state(contract, compiled):
    """With all three terms on (the paper's PID, not rlpyt's I-only default), the kernel follows the transcription
    of rlpyt's update: the derivative differences _cost_d against its value pid_d_delay updates earlier (the
    deque), and float32 state costs at most a few float32 ulps of λ over 400 steps."""
    entry = contract.controller("pid_lagrangian")
    delay = int(entry.value("d_delay"))
    kernel = compiled("pid_lagrangian", PID_KP="2.0", PID_KI="0.5", PID_KD="3.0")
    rng = np.random.default_rng(35)
    kl = (0.01 * np.exp(rng.normal(0.0, 0.8, 400))).astype(F32)
    kl[150:170] *= 20  # a step: the derivative term reacts, and only for d_delay updates after each change
    runs, isv = _runs(kernel, entry.value("seed_lambda"), kl, 0.01)
    expected = _rlpyt([float(k) for k in kl], float(F32(0.01)), 2.0, 0.5, 3.0, delay,
                      entry.value("p_ema_alpha"), entry.value("d_ema_alpha"), entry.value("seed_lambda"))
    for mode, lam in runs.items():
        np.testing.assert_allclose(lam, expected, rtol=4 * np.finfo(F32).eps, atol=0, err_msg=mode)
    spec_lam, _ = stateful.run(stateful.StatefulRule.of(entry, k_p=2.0, k_i=0.5, k_d=3.0),
                               entry.value("seed_lambda"), kl, np.full_like(kl, 0.01))
    assert np.array_equal(spec_lam.view(np.uint32), runs["looped"].view(np.uint32))
    assert np.array_equal(runs["per_step"].view(np.uint32), runs["looped"].view(np.uint32))


@pytest.mark.parametrize("peer", ["pid_lagrangian", "geco"])
def test_kernel_agrees_with_the_spec_model_bit_for_bit(contract, compiled, peer):
    """The spec model written from the contract's equations, on a noisy trace with a step and a target change."""
    entry = contract.controller(peer)
    rng = np.random.default_rng(7)
    kl = (0.01 * np.exp(rng.normal(0.0, 1.0, 600))).astype(F32)
    kl[200:260] *= 30
    tg = np.full(kl.shape, 0.01, dtype=F32)
    tg[400:] = 0.02
    kernel = compiled(peer)
    looped, isv = kernel.run_looped(new_isv(kernel.slots, [entry.value("seed_lambda")]), kl[:, None], tg[:, None])
    lam, state = stateful.run(stateful.StatefulRule.of(entry), entry.value("seed_lambda"), kl, tg)
    assert np.array_equal(lam.view(np.uint32), looped[:, 0].view(np.uint32))
    assert [isv[0, s.slot] for s in entry.state] == pytest.approx([state[s.name][0] for s in entry.state], rel=0)
    # isolation: the declared state slots are the only writes besides λ; an undeclared one would be flagged
    assert stray_writes(kernel.slots, isv, kl[-1:], tg[-1:]) == []
    assert {slot for _, slot in stray_writes(contract.slots, isv, kl[-1:], tg[-1:])} == {s.slot for s in entry.state}


@pytest.mark.parametrize("peer", ["pid_lagrangian", "geco"])
def test_the_harness_seeds_the_declared_start_values(contract, peer):
    slots = contract.slots_of(peer)
    isv = new_isv(slots, [0.5, 0.25])
    for s in contract.controller(peer).state:
        assert (isv[:, s.slot] == np.float32(s.start)).all(), s
    assert np.isnan(new_isv(contract.slots, [0.5])[0, contract.controller(peer).state[0].slot])  # no state: sentinel


def test_stateful_entries_measure_anti_windup_and_step_response(contract):
    """Properties of a stateful rule are measured from its equations (the spec model), not read: the PID's integral
    never goes below 0 (anti-windup) and λ ≥ 0 under a long stretch below the limit; after a step of the KL above the
    limit λ rises at once and, the KL back at the limit, holds (an integrator); GECO stays in [floor, ceiling]."""
    pid = contract.controller("pid_lagrangian")
    kl = np.concatenate([np.zeros(500), np.full(50, 0.02), np.full(50, 0.01)]).astype(F32)
    lam, state = stateful.run(stateful.StatefulRule.of(pid), pid.value("seed_lambda"), kl, np.full_like(kl, 0.01))
    assert (lam >= 0).all() and state["integral"][0] >= 0
    assert lam[499] == 0 and lam[500] > 0  # wound down to 0, then up at the first step above the limit
    assert lam[-1] == lam[550]  # at the limit the integral holds its value
    geco = contract.controller("geco")
    for lam0, k in ((geco.value("ceiling"), 1.0), (geco.value("floor"), 0.0)):
        lam, _ = stateful.run(stateful.StatefulRule.of(geco), lam0, np.full(50, k, F32), np.full(50, 0.5, F32))
        assert ((lam >= F32(geco.value("floor"))) & (lam <= F32(geco.value("ceiling")))).all()
