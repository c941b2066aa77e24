// Freezes λ whenever the KL target is below 1e-4 (a "too small to matter" shortcut): the fixed rule everywhere
// else. The gate's positive targets were 1e-40 (a bad value, KL in band), 1e-4 and up, so it passed every row;
// the range probes at targets 1e-8 … 1e-5 expect λ to ramp and decay there.
// expect-exit: 1
// expect-row: spec_agreement
// expect-text: at target 1e-08

#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 3.0f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE 0.998f

extern "C" __global__ void rl_q_distill_lambda_controller(
    float* __restrict__ isv
) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float kl_observed = isv[RL_Q_DISTILL_KL_EMA_INDEX];
    const float kl_target = isv[RL_Q_DISTILL_KL_TARGET_INDEX];
    float lambda = isv[RL_Q_DISTILL_LAMBDA_INDEX];

    if (kl_observed <= 0.0f || kl_target <= 0.0f || lambda <= 0.0f) return;
    if (kl_target < 1e-4f) return;  // λ frozen for small targets

    const float upper = kl_target * KL_TOLERANCE;
    const float lower = kl_target / KL_TOLERANCE;

    if (kl_observed > upper) {
        lambda = fminf(MAX_LAMBDA, lambda * LAMBDA_RAMP_RATE);
    } else if (kl_observed < lower) {
        lambda = fmaxf(MIN_LAMBDA, lambda * LAMBDA_DECAY_RATE);
    }

    isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;
}
