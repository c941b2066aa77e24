// batch_ppo.cu — the KL penalty adjustment of Google's BatchPPO, as a
// one-thread ISV controller (the penalty in slot 486).
//
// Source: google-research/batch-ppo at 3d09705 (2019-01-08, the repository's
// last commit), agents/algorithms/ppo/ppo.py, PPO._adjust_penalty ("Based on
// John Schulman's implementation"):
//   maybe_increase = tf.cond(kl_change > 1.3 * self._config.kl_target,
//                            lambda: self._penalty.assign(self._penalty * 1.5), float)
//   maybe_decrease = tf.cond(kl_change < 0.7 * self._config.kl_target,
//                            lambda: self._penalty.assign(self._penalty / 1.5), float)
// Defaults (agents/scripts/configs.py): kl_init_penalty = 1, kl_target = 1e-2;
// self._penalty = tf.Variable(kl_init_penalty, False, dtype=tf.float32).
//
// Arithmetic as the source runs it: 1.3 * kl_target is a Python float (double),
// rounded once to float32 when TensorFlow compares it with the float32
// kl_change; the penalty is a float32 variable, · 1.5 and / 1.5 float32
// operations. This differs from modular_rl (double throughout) at the
// thresholds' 1-ulp edges. The two tf.cond's are independent: both fire only
// where the thresholds cross (target < 0); the source leaves their order open
// and this kernel takes the source's order (increase, then decrease). No
// bound, no guard: KL ≤ 0 lowers the penalty. Only the slot layout is this suite's.

#define BPPO_PENALTY_INDEX 486
#define BPPO_KL_INDEX 488
#define BPPO_KL_TARGET_INDEX 491

#define KL_UPPER_FACTOR 1.3
#define KL_LOWER_FACTOR 0.7
#define PENALTY_FACTOR 1.5f

extern "C" __global__ void batch_ppo_adjust_penalty(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float kl_change = isv[BPPO_KL_INDEX];
    const double kl_target = isv[BPPO_KL_TARGET_INDEX];
    float penalty = isv[BPPO_PENALTY_INDEX];

    if (kl_change > (float)(KL_UPPER_FACTOR * kl_target)) {
        penalty = penalty * PENALTY_FACTOR;
    }
    if (kl_change < (float)(KL_LOWER_FACTOR * kl_target)) {
        penalty = penalty / PENALTY_FACTOR;
    }

    isv[BPPO_PENALTY_INDEX] = penalty;
}
