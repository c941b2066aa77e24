"""The peers against their sources' own decisions: literal cases derived by hand from each release, in its dtype.

Each case is λ0, a KL trace and a target, and the λ after each step that the
cited release computes, worked out by hand from its code in its arithmetic
(the edges at one float32 ulp, KL ≤ 0, a negative KL, a negative target, the
bounds). Every case runs through the peer's kernel on every backend, one
launch per step and looped, and is compared bit for bit (a NaN with a NaN).
TF-Agents' own unit tests (``ppo_agent_test.py`` at v0.19.0) are reproduced
through the kernel built with their tolerance, 0.5.

Float32 values are written as the shortest decimal that reads back as that
float32; fl32(x) in a derivation is x rounded to nearest float32.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from repro.core.f32 import F32, differs_beyond_nan, same
from repro.core.isv import new_isv

NAN = float("nan")


@dataclass(frozen=True)
class Case:
    peer: str
    name: str
    lam0: float
    kl: tuple[float, ...]
    target: float
    expected: tuple[float, ...]  # λ after each step
    why: str  # the source's decision, by hand


PAPER = "Schulman et al. 2017 §4: If d < d_targ/1.5, β ← β/2; If d > d_targ × 1.5, β ← β × 2 (real arithmetic)"
RLLIB = ("ray-project/ray fa1dda2 ppo_torch_learner.py PPOTorchLearner._update_module_kl_coeff: if kl > 2.0 * "
         "config.kl_target: curr_var.data *= 1.5 / elif kl < 0.5 * config.kl_target: curr_var.data *= 0.5")
TFA = ("tensorflow/agents v0.19.0 ppo_agent.py PPOAgent.update_adaptive_kl_beta: mean_kl < / > target * (1.0 ∓ tol), "
       "factor 1.0/1.5 | 1.5 | 1.0 (float32), tf.clip_by_value(β·factor, 10e-16, 10e16), tf.case(exclusive=True)")
MRL = ("joschu/modular_rl 6970cde modular_rl/ppo.py PpoLbfgsUpdater.__call__: if klafter > 1.3*kl_target: "
       "kl_coeff *= 1.5 / elif klafter < 0.7*kl_target: kl_coeff /= 1.5 (float64)")
BPPO = ("google-research/batch-ppo 3d09705 agents/algorithms/ppo/ppo.py PPO._adjust_penalty: tf.cond(kl_change > "
        "1.3 * kl_target, penalty * 1.5); tf.cond(kl_change < 0.7 * kl_target, penalty / 1.5) (float32 penalty)")
TRL = ("huggingface/trl v0.11.4 trl/trainer/utils.py AdaptiveKLController.update: np.clip(current / target - 1, "
       "-0.2, 0.2); mult = 1 + err * n_steps / horizon; value *= mult (float32 under NumPy ≥ 2; n_steps 128)")

#: Per peer, the source line every one of its cases is derived from.
CITATION = {"ppo_paper": PAPER, "rllib": RLLIB, "tf_agents": TFA, "modular_rl": MRL, "batch_ppo": BPPO, "ziegler": TRL}

CASES = [
    # --- the paper: exact comparisons; β/2 and β×2 rounded once to the float32 slot ---
    Case("ppo_paper", "lower edge 1 ulp inside the real threshold", 1.0, (6.666666507720947,), 10.0, (0.5,),
         "d = fl32(10/1.5) = 6.6666665 < 20/3 (3d = 19.9999995 < 20): β/2 (a float32 threshold fl32(10/1.5) holds)"),
    Case("ppo_paper", "lower edge: next float32 above 20/3", 1.0, (6.6666669845581055,), 10.0, (1.0,),
         "d = 6.666667 > 20/3 and d < 15: neither If: β held"),
    Case("ppo_paper", "upper edge: d = 15 exactly, then 1 ulp above", 1.0, (15.0, 15.000000953674316), 10.0, (1.0, 2.0),
         "15 > 10 × 1.5 = 15 is false: held; 15.000001 > 15: β × 2"),
    Case("ppo_paper", "d = 0 and d < 0 halve β", 1.0, (0.0, -1.0), 0.02, (0.5, 0.25),
         "0 < 0.02/1.5 and −1 < 0.02/1.5: β/2 twice (no test of d)"),
    Case("ppo_paper", "negative target: both Ifs, in the paper's order", 3.0, (-1.0,), -1.0, (3.0,),
         "d_targ = −1: −1 < −1/1.5 and −1 > −1.5 both hold: β/2 = 1.5, then × 2 = 3"),
    Case("ppo_paper", "β = 0 and β < 0 are not tested", -1.0, (0.0002, 2.0), 0.02, (-0.5, -1.0),
         "β/2 = −0.5 at low d, β × 2 = −1 at high d"),
    Case("ppo_paper", "NaN KL: no comparison holds", 1.0, (NAN,), 0.02, (1.0,), "NaN < x and NaN > x are false: held"),
    # --- RLlib: float32 kl against fl32(2.0 * kl_target), fl32(0.5 * kl_target); float32 coefficient ---
    Case("rllib", "upper edge: kl = fl32(0.02), then 1 ulp above", 0.2, (0.019999999552965164, 0.020000001415610313),
         0.009999999776482582, (0.2, 0.30000001192092896),
         "fl32(2.0 × fl32(0.01)) = 0.02 (fl32): not >; next float32: > : fl32(0.2) × 1.5 = 0.30000001"),
    Case("rllib", "kl = 0 and kl < 0 halve the coefficient", 0.2, (0.0, -0.5), 0.01, (0.10000000149011612,
                                                                                   0.05000000074505806),
         "0 < 0.5 × 0.01 and −0.5 < 0.005: × 0.5 twice (NaN only warns; nothing else is tested)"),
    Case("rllib", "NaN KL: a warning, no change", 0.2, (NAN,), 0.01, (0.20000000298023224,),
         "np.isnan(kl) logs a warning; NaN > x and NaN < x are false"),
    Case("rllib", "negative target: the if branch first", 0.2, (-1.0,), -1.0, (0.30000001192092896,),
         "−1 > 2.0 × −1 = −2: × 1.5 (the elif is not reached)"),
    # --- TF-Agents v0.19.0 ---
    Case("tf_agents", "upper edge: KL = fl32(7.8) at target 6 is in band", 1.0, (7.800000190734863,), 6.0, (1.0,),
         "fl32(6 × (1.0 + 0.3)) = fl32(7.8000000000000003) = 7.8000002: KL not >: factor 1.0 (float32 6·(1+0.3f) = "
         "7.7999997 would ramp)"),
    Case("tf_agents", "upper edge: 1 ulp above ramps", 1.0, (7.8000006675720215,), 6.0, (1.5,),
         "7.8000007 > 7.8000002: factor 1.5"),
    Case("tf_agents", "lower edge: KL = fl32(4.2) holds, 1 ulp below decays", 1.0, (4.199999809265137,
                                                                                   4.1999993324279785),
         6.0, (1.0, 0.6666666865348816),
         "fl32(6 × (1.0 − 0.3)) = fl32(4.1999999999999993) = 4.1999998: not <; 4.1999993 <: factor fl32(1/1.5)"),
    Case("tf_agents", "KL = 0 lowers β", 1.0, (0.0,), 0.01, (0.6666666865348816,), "0 < fl32(0.007): factor fl32(1/1.5)"),
    Case("tf_agents", "ceiling: β·1.5 above 10e16 is clipped", 8.0e16, (1.0,), 0.01, (9.999999843067494e16,),
         "fl32(8e16) × 1.5 = 1.2e17 > fl32(10e16) = 99999998430674944: clipped to it"),
    Case("tf_agents", "the clip applies in band too", 1.0e20, (0.01,), 0.01, (9.999999843067494e16,),
         "in band: β × 1.0 = 1e20, clipped to fl32(10e16)"),
    Case("tf_agents", "β ≤ 0 is clipped up to the floor", 0.0, (0.01, 0.01), 0.01, (1.0000000036274937e-15,
                                                                                    1.0000000036274937e-15),
         "0 × 1.0 = 0 < fl32(10e-16) = 1.0000000036274937e-15: clipped up; then held there"),
    Case("tf_agents", "NaN β stays NaN (tf.clip_by_value passes NaN)", NAN, (1.0,), 0.01, (NAN,),
         "NaN × 1.5 = NaN; tf.minimum and tf.maximum propagate NaN (TensorFlow ≥ 2.4)"),
    Case("tf_agents", "negative target: both bounds hold, tf.case raises", 1.0, (-1.0,), -1.0, (1.0,),
         "−1 < fl32(−0.7) and −1 > fl32(−1.3): exclusive=True raises InvalidArgumentError; β is not assigned"),
    # --- modular_rl: float64 throughout ---
    Case("modular_rl", "lower edge: KL = fl32(0.7) is below the double 0.7", 1.0, (0.699999988079071,), 1.0,
         (0.6666666865348816,), "0.699999988 < 0.7 × 1.0 = 0.69999999999999996 (double): kl_coeff /= 1.5; fl32 of the "
                                "double 0.6666666666666666"),
    Case("modular_rl", "upper edge: KL = fl32(1.3) is below the double 1.3", 1.0, (1.2999999523162842,
                                                                                   1.3000000715255737), 1.0,
         (1.0, 1.5), "1.29999995 > 1.3000000000000000444 is false: held; 1.3000001 >: × 1.5"),
    Case("modular_rl", "target 3: fl32(3.9) lies above the double threshold", 1.0, (3.9000000953674316,), 3.0, (1.5,),
         "1.3 × 3.0 = 3.9000000000000004 (double) < fl32(3.9) = 3.9000001: × 1.5 (BatchPPO holds here)"),
    Case("modular_rl", "KL = 0 and KL < 0 lower the coefficient", 1.0, (0.0, -1.0), 0.01, (0.6666666865348816,
                                                                                         0.4444444477558136),
         "0 < 0.007 and −1 < 0.007: ÷ 1.5 twice; the slot keeps fl32(2/3), whose double quotient by 1.5 rounds to "
         "0.44444445 (as the double 4/9 does)"),
    Case("modular_rl", "negative target: the if branch first", 1.0, (-1.0,), -1.0, (1.5,),
         "−1 > 1.3 × −1 = −1.3: × 1.5 (the elif is not reached)"),
    # --- BatchPPO: float32 thresholds and penalty ---
    Case("batch_ppo", "lower edge: KL = fl32(0.7) equals fl32(0.7 × 1.0)", 1.0, (0.699999988079071,), 1.0, (1.0,),
         "fl32(0.7 × 1.0) = 0.699999988: KL not <: held (modular_rl, in double, lowers it)"),
    Case("batch_ppo", "target 3: KL = fl32(3.9) equals the float32 threshold", 1.0, (3.9000000953674316,
                                                                                     3.900000333786011), 3.0,
         (1.0, 1.5), "fl32(1.3 × 3.0) = 3.9000001: not >, held (modular_rl ramps); next float32: × 1.5"),
    Case("batch_ppo", "KL = 0 lowers the penalty", 1.0, (0.0,), 0.01, (0.6666666865348816,),
         "0 < fl32(0.007): penalty / 1.5 in float32"),
    Case("batch_ppo", "negative target: both tf.conds, increase then decrease", 0.9415651559829712, (-1.0,), -1.0,
         (0.941565215587616,), "−1 > fl32(−1.3) and −1 < fl32(−0.7): fl32(p × 1.5) = 1.4123478, then / 1.5 = "
                               "0.9415652 (not p: the two roundings)"),
    # --- TRL v0.11.4: float32 under NumPy ≥ 2 ---
    Case("ziegler", "KL at the target: mult 1", 0.2, (6.0,), 6.0, (0.20000000298023224,),
         "6/6 − 1 = 0: mult = 1 + 0·128/10000 = 1"),
    Case("ziegler", "KL = 0 and KL < 0 saturate the error at −0.2", 0.2, (0.0, -6.0), 6.0,
         (0.19948799908161163, 0.1989773064851761),
         "0/6 − 1 = −1 and −6/6 − 1 = −2, clipped to fl32(−0.2): mult = 1 + fl32(fl32(−0.2·128)/10000) = 0.99744; "
         "fl32(0.2) × 0.99744 = 0.19948800, × 0.99744 = 0.19897731"),
    Case("ziegler", "high KL saturates at +0.2", 0.2, (12.0, 12.0), 6.0, (0.20051200687885284, 0.2010253220796585),
         "12/6 − 1 = 1, clipped to 0.2: mult = 1.00256 (fl32); applied twice"),
    Case("ziegler", "target 0: KL/0 = inf, clipped", 0.2, (1.0,), 0.0, (0.20051200687885284,),
         "1/0 − 1 = inf, np.clip → 0.2: mult 1.00256"),
    Case("ziegler", "NaN KL passes np.clip", 0.2, (NAN,), 6.0, (NAN,), "NaN/6 − 1 = NaN; np.clip(NaN) = NaN; value NaN"),
]


def _case_id(c: Case) -> str:
    return f"{c.peer}-{c.name}"


@pytest.fixture(scope="module")
def compiled(contract, backend):
    kernels = {}

    def get(name: str, **defines):
        key = (name, tuple(sorted(defines.items())))
        if key not in kernels:
            source = contract.source(name)
            kernels[key] = backend.compile(source.with_defines(**defines) if defines else source, contract.slots)
        return kernels[key]

    return get


def _runs(kernel, slots, lam0, kl, target):
    """λ after each step, one launch per step and looped."""
    kl = np.asarray(kl, dtype=F32)
    tg = np.full(kl.shape, target, dtype=F32)
    per_step, _ = kernel.run_per_step(new_isv(slots, [lam0])[0], kl, tg)
    looped, _ = kernel.run_looped(new_isv(slots, [lam0]), kl[:, None], tg[:, None])
    return {"per_step": per_step, "looped": looped[:, 0]}


def test_every_peer_has_literal_cases(contract):
    """Every peer in the contract has cases here, from the source its contract entry cites."""
    assert {c.peer for c in CASES} == set(contract.peers()) == set(CITATION)
    for name, line in CITATION.items():
        project = contract.controller(name).release["project"]
        assert project.split(" ")[0].split(",")[0] in line, (name, project)


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_peer_kernel_reproduces_its_source_case(contract, compiled, case):
    assert len(case.kl) == len(case.expected)
    for mode, lam in _runs(compiled(case.peer), contract.slots, case.lam0, case.kl, case.target).items():
        assert not differs_beyond_nan(lam, case.expected).any(), \
            f"{mode}: {lam} ≠ {case.expected} ({case.why}; {CITATION[case.peer]})"


# --- TF-Agents' own tests (tensorflow/agents v0.19.0, tf_agents/agents/ppo/ppo_agent_test.py) ---
#: PPOAgent(initial_adaptive_kl_beta=1.0, adaptive_kl_target=10.0, adaptive_kl_tolerance=0.5) in both tests.
TFA_TEST = {"beta": 1.0, "target": 10.0, "tolerance": "0.5"}


def test_tf_agents_test_update_adaptive_kl_beta(contract, compiled):
    """testUpdateAdaptiveKlBeta: KL 10 → β 1.0 (in band), 100 → 1.5, 1 → 1.0 (assertEqual)."""
    kernel = compiled("tf_agents", ADAPTIVE_KL_TOLERANCE=TFA_TEST["tolerance"])
    for mode, lam in _runs(kernel, contract.slots, TFA_TEST["beta"], (10.0, 100.0, 1.0), TFA_TEST["target"]).items():
        assert not differs_beyond_nan(lam, (1.0, 1.5, 1.0)).any(), f"{mode}: {lam}"


def test_tf_agents_test_adaptive_kl_loss(contract, compiled):
    """testAdaptiveKlLoss: adaptive_kl_loss = β · mean_kl; after an update at KL 1 the loss at KL 1 is lower
    (assertGreater(loss_1, loss_2)); after an update at KL 100 the loss at KL 100 is higher (assertLess)."""
    kernel = compiled("tf_agents", ADAPTIVE_KL_TOLERANCE=TFA_TEST["tolerance"])
    beta0 = F32(TFA_TEST["beta"])
    for mode, lam in _runs(kernel, contract.slots, beta0, (1.0, 100.0), TFA_TEST["target"]).items():
        loss = lambda beta, kl: F32(F32(beta) * F32(kl))  # noqa: E731
        assert loss(beta0, 1.0) > loss(lam[0], 1.0), mode
        assert loss(lam[0], 100.0) < loss(lam[1], 100.0), mode


def test_tf_agents_tolerance_is_the_built_constant(contract, compiled):
    """The 0.5 build is not the default build: KL 14 at target 10 is in band at tolerance 0.5, above it at 0.3."""
    built = compiled("tf_agents", ADAPTIVE_KL_TOLERANCE=TFA_TEST["tolerance"])
    default = compiled("tf_agents")
    args = (contract.slots, 1.0, (14.0,), 10.0)
    assert same(_runs(built, *args)["looped"], (1.0,)) and same(_runs(default, *args)["looped"], (1.5,))


def test_tf_agents_sustained_high_kl_holds_beta_at_the_ceiling(contract, compiled):
    """From β = 1 under high KL, β·1.5 per step (float32) passes fl32(10e16) at step 97 and is held there."""
    lam = _runs(compiled("tf_agents"), contract.slots, 1.0, (1.0,) * 100, 0.01)["looped"]
    by_hand = F32(1.0)
    for _ in range(96):  # 1.5^96 ≈ 8.03e16 < 1e17, rounded to float32 each step as the float32 variable is
        by_hand = F32(by_hand * F32(1.5))
    assert same(lam[95], by_hand) and float(by_hand) < 1e17
    assert same(lam[96:], np.full(4, F32(10e16)))


def test_rllib_test_kl_coeff_changes(contract, compiled):
    """RLlib's test_ppo_learner.py test_kl_coeff_changes starts from kl_coeff = 0.01, trains, and asserts only that
    the coefficient changed. Here: from 0.01 a KL outside [0.5, 2]·target changes it (×1.5 above, ×0.5 below), a
    KL inside leaves it; the literal cases above pin the values."""
    kernel = compiled("rllib")
    for kl, moved in ((0.03, True), (0.001, True), (0.01, False)):
        lam = _runs(kernel, contract.slots, 0.01, (kl,), 0.01)["looped"]
        assert (not same(lam, (0.01,))) == moved, (kl, lam)
