// rllib.cu — RLlib's PPO KL-coefficient update, as a one-thread ISV controller
// (kl_coeff in slot 486).
//
// Source: ray-project/ray, rllib/policy/torch_mixins.py, KLCoeffMixin.update_kl
// (and the same rule in rllib/algorithms/ppo/torch/ppo_torch_learner.py,
// PPOTorchLearner.additional_update_for_module):
//   if sampled_kl > 2.0 * kl_target:   kl_coeff *= 1.5
//   elif sampled_kl < 0.5 * kl_target: kl_coeff *= 0.5
// Defaults (rllib/algorithms/ppo/ppo.py, PPOConfig.__init__): kl_coeff = 0.2,
// kl_target = 0.01. No bound on kl_coeff.
//
// Not from RLlib: the guards (KL, target or coefficient ≤ 0 leave it alone)
// and the slot layout are this suite's convention. RLlib computes in Python
// float64 (or a float32 torch variable); this kernel is float32, with each
// product written in RLlib's order: 2.0 * target, 0.5 * target, coeff * 1.5,
// coeff * 0.5. No floor and no ceiling: the coefficient may underflow to 0.

#define RLLIB_KL_COEFF_INDEX 486
#define RLLIB_KL_INDEX 488
#define RLLIB_KL_TARGET_INDEX 491

#define KL_UPPER_FACTOR 2.0f
#define KL_LOWER_FACTOR 0.5f
#define COEFF_INCREASE 1.5f
#define COEFF_DECREASE 0.5f

extern "C" __global__ void rllib_update_kl(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float sampled_kl = isv[RLLIB_KL_INDEX];
    const float kl_target = isv[RLLIB_KL_TARGET_INDEX];
    float kl_coeff = isv[RLLIB_KL_COEFF_INDEX];

    if (sampled_kl <= 0.0f || kl_target <= 0.0f || kl_coeff <= 0.0f) return;

    if (sampled_kl > KL_UPPER_FACTOR * kl_target) {
        kl_coeff = kl_coeff * COEFF_INCREASE;
    } else if (sampled_kl < KL_LOWER_FACTOR * kl_target) {
        kl_coeff = kl_coeff * COEFF_DECREASE;
    }

    isv[RLLIB_KL_COEFF_INDEX] = kl_coeff;
}
