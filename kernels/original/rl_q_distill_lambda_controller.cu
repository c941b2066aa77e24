// rl_q_distill_lambda_controller.cu — the PRE-FIX controller, RECONSTRUCTED.
//
// This file is not the shipped original: no copy of it survives. It is
// rebuilt from the facts of commit 96abc364b5's message so that the suite
// can reproduce the collapse that commit fixed:
//
//   - "the symmetric Schulman controller decayed λ from 0.5 to 0.001 in 34
//     steps (÷1.2/step)"           -> decay ÷1.2 per step, seed λ 0.5
//   - "MIN_LAMBDA 0.001 → 0.05"    -> MIN_LAMBDA was 0.001
//   - "Asymmetric rates: ramp 1.2×/step" (the ramp the fix kept, and the
//     controller was symmetric)   -> ramp ×1.2 per step
//   - "Dead zone tolerance 1.5× → 3.0×" -> KL_TOLERANCE was 1.5
//
// Everything else — signature, slots, MAX_LAMBDA 1.0, the guards and the
// order of the tests — is taken unchanged from the fixed kernel, which the
// commit describes as a change of constants only. Division by 1.2 is
// written as a multiplication by the float32 constant 1.0f / 1.2f so that
// the code has the fixed kernel's shape (λ *= DECAY_RATE).

#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.001f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 1.5f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE (1.0f / 1.2f)

extern "C" __global__ void rl_q_distill_lambda_controller(
    float* __restrict__ isv
) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float kl_observed = isv[RL_Q_DISTILL_KL_EMA_INDEX];
    const float kl_target = isv[RL_Q_DISTILL_KL_TARGET_INDEX];
    float lambda = isv[RL_Q_DISTILL_LAMBDA_INDEX];

    if (kl_observed <= 0.0f || kl_target <= 0.0f || lambda <= 0.0f) return;

    const float upper = kl_target * KL_TOLERANCE;
    const float lower = kl_target / KL_TOLERANCE;

    if (kl_observed > upper) {
        lambda = fminf(MAX_LAMBDA, lambda * LAMBDA_RAMP_RATE);
    } else if (kl_observed < lower) {
        lambda = fmaxf(MIN_LAMBDA, lambda * LAMBDA_DECAY_RATE);
    }

    isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;
}
