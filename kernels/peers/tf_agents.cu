// tf_agents.cu — TF-Agents' PPO adaptive KL β, as a one-thread ISV controller
// (β in slot 486).
//
// Source: tensorflow/agents v0.19.0, tf_agents/agents/ppo/ppo_agent.py,
// PPOAgent.update_adaptive_kl_beta (the clip is there since v0.16.0):
//   mean_kl_below_bound = mean_kl < self._adaptive_kl_target * (1.0 - self._adaptive_kl_tolerance)
//   mean_kl_above_bound = mean_kl > self._adaptive_kl_target * (1.0 + self._adaptive_kl_tolerance)
//   factor = tf.case([(below, tf.constant(1.0 / 1.5, dtype=tf.float32)),
//                     (above, tf.constant(1.5, dtype=tf.float32))],
//                    default=tf.constant(1.0, dtype=tf.float32), exclusive=True)
//   new_beta = tf.clip_by_value(beta * factor, clip_value_min=10e-16, clip_value_max=10e16)
// Defaults (PPOAgent.__init__): initial_adaptive_kl_beta = 1.0,
// adaptive_kl_target = 0.01, adaptive_kl_tolerance = 0.3.
//
// Arithmetic as the source runs it: target and tolerance are Python floats, so
// each threshold is a double product, rounded once to float32 when TensorFlow
// compares it with the float32 mean_kl. β is a float32 variable; the factors
// are float32 constants (1.0 / 1.5 rounded once). The clip applies on every
// update, in band too (β · 1.0), with float32 bounds fl32(10e-16) and
// fl32(10e16); tf.clip_by_value passes NaN through (TensorFlow ≥ 2.4), so the
// clip is written with comparisons, not fminf/fmaxf. Both conditions hold only
// where the thresholds cross (target < 0): tf.case(exclusive=True) then raises
// and β is not assigned, so this kernel leaves it. No guard: KL ≤ 0 lowers β.
// Only the slot layout is this suite's.

#define TFA_BETA_INDEX 486
#define TFA_KL_INDEX 488
#define TFA_KL_TARGET_INDEX 491

#define ADAPTIVE_KL_TOLERANCE 0.3
#define KL_FACTOR_DOWN ((float)(1.0 / 1.5))
#define KL_FACTOR_UP 1.5f
#define KL_FACTOR_HOLD 1.0f
#define MIN_BETA ((float)10e-16)
#define MAX_BETA ((float)10e16)

extern "C" __global__ void tf_agents_update_adaptive_kl_beta(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float mean_kl = isv[TFA_KL_INDEX];
    const double target = isv[TFA_KL_TARGET_INDEX];
    const float beta = isv[TFA_BETA_INDEX];

    const bool below = mean_kl < (float)(target * (1.0 - ADAPTIVE_KL_TOLERANCE));
    const bool above = mean_kl > (float)(target * (1.0 + ADAPTIVE_KL_TOLERANCE));
    if (below && above) return;  // tf.case(exclusive=True) raises: no assignment
    const float factor = below ? KL_FACTOR_DOWN : (above ? KL_FACTOR_UP : KL_FACTOR_HOLD);

    float clipped = beta * factor;
    clipped = clipped > MAX_BETA ? MAX_BETA : clipped;  // tf.minimum, then tf.maximum: NaN passes
    clipped = clipped < MIN_BETA ? MIN_BETA : clipped;
    isv[TFA_BETA_INDEX] = clipped;
}
