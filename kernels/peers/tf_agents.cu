// tf_agents.cu — TF-Agents' PPO adaptive KL β, as a one-thread ISV controller
// (β in slot 486).
//
// Source: tensorflow/agents, tf_agents/agents/ppo/ppo_agent.py,
// PPOAgent.update_adaptive_kl_beta:
//   mean_kl_below_bound = mean_kl < target * (1.0 - tolerance)
//   mean_kl_above_bound = mean_kl > target * (1.0 + tolerance)
//   factor = tf.case([(below, 1.0 / 1.5), (above, 1.5)], default=1.0)
//            (each a tf.constant(..., dtype=tf.float32))
//   new_beta = tf.maximum(beta * factor, 10e-16)
// Defaults (PPOAgent.__init__): initial_adaptive_kl_beta = 1.0,
// adaptive_kl_target = 0.01, adaptive_kl_tolerance = 0.3. A floor of 10e-16
// (= 1e-15), no ceiling.
//
// Not from TF-Agents: the guards (KL, target or β ≤ 0 leave β alone) and the
// slot layout are this suite's convention. The in-band case multiplies by 1.0
// and re-applies the floor, as the source does (β below the floor is raised
// to it even in band). The decrease factor is float32(1.0 / 1.5), rounded once
// from the double quotient, as tf.constant(1.0 / 1.5, dtype=tf.float32) is.

#define TFA_BETA_INDEX 486
#define TFA_KL_INDEX 488
#define TFA_KL_TARGET_INDEX 491

#define ADAPTIVE_KL_TOLERANCE 0.3f
#define KL_FACTOR_DOWN ((float)(1.0 / 1.5))
#define KL_FACTOR_UP 1.5f
#define KL_FACTOR_HOLD 1.0f
#define MIN_BETA 10e-16f

extern "C" __global__ void tf_agents_update_adaptive_kl_beta(float* __restrict__ isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float mean_kl = isv[TFA_KL_INDEX];
    const float target = isv[TFA_KL_TARGET_INDEX];
    const float beta = isv[TFA_BETA_INDEX];

    if (mean_kl <= 0.0f || target <= 0.0f || beta <= 0.0f) return;

    const bool below = mean_kl < target * (1.0f - ADAPTIVE_KL_TOLERANCE);
    const bool above = mean_kl > target * (1.0f + ADAPTIVE_KL_TOLERANCE);
    const float factor = below ? KL_FACTOR_DOWN : (above ? KL_FACTOR_UP : KL_FACTOR_HOLD);

    isv[TFA_BETA_INDEX] = fmaxf(beta * factor, MIN_BETA);
}
