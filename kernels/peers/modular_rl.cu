// modular_rl.cu — the adaptive penalty of John Schulman's modular_rl PPO, as a
// one-thread ISV controller (kl_coeff in slot 486).
//
// Source: joschu/modular_rl, modular_rl/ppo.py, PpoLbfgsUpdater.__call__ (and
// PpoSgdUpdater.__call__, the same rule):
//   if klafter > 1.3*kl_target:   kl_coeff *= 1.5
//   elif klafter < 0.7*kl_target: kl_coeff /= 1.5
// Defaults: kl_coeff = 1.0 (set in __init__), kl_target = 1e-2 (options).
// No bound on kl_coeff. google-research/batch-ppo (agents/algorithms/ppo/ppo.py,
// PPO._adjust_penalty, "Based on John Schulman's implementation") applies the
// same thresholds and factors (penalty * 1.5 above 1.3·target, penalty / 1.5
// below 0.7·target) as two independent tf.cond's; since the two conditions
// cannot both hold, the result is the same rule.
//
// Not from modular_rl: the guards (KL, target or coefficient ≤ 0 leave it
// alone) and the slot layout are this suite's convention. Python computes in
// float64; this kernel is float32 with modular_rl's order of operations:
// 1.3*target, 0.7*target, coeff*1.5, coeff/1.5.

#define MRL_KL_COEFF_INDEX 486
#define MRL_KL_INDEX 488
#define MRL_KL_TARGET_INDEX 491

#define KL_UPPER_FACTOR 1.3f
#define KL_LOWER_FACTOR 0.7f
#define COEFF_FACTOR 1.5f

extern "C" __global__ void modular_rl_adapt_kl_coeff(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float klafter = isv[MRL_KL_INDEX];
    const float kl_target = isv[MRL_KL_TARGET_INDEX];
    float kl_coeff = isv[MRL_KL_COEFF_INDEX];

    if (klafter <= 0.0f || kl_target <= 0.0f || kl_coeff <= 0.0f) return;

    if (klafter > KL_UPPER_FACTOR * kl_target) {
        kl_coeff = kl_coeff * COEFF_FACTOR;
    } else if (klafter < KL_LOWER_FACTOR * kl_target) {
        kl_coeff = kl_coeff / COEFF_FACTOR;
    }

    isv[MRL_KL_COEFF_INDEX] = kl_coeff;
}
