// The fixed kernel whose decay asks whether (λ + 1e300)·1e300 stays below 1e4000 in long double: x87's 80 bits on
// the host say yes (0.998), NVRTC treats long double as double (its warning 20208-D), where it overflows (0.9). It
// passed with exit 0; on the H200 λ 0.5 went to 0.45 in one decay step (a reviewer's sixth round).
// expect-exit: 1
// expect-row: device_view
// expect-text: the text names long double

// rl_q_distill_lambda_controller.cu — adaptive λ_distill controller.
//
// Adapts the Q→π distillation strength (λ, slot 486) from the KL
// divergence between Q's Boltzmann policy and π's softmax (slot 488).
//
// Controller logic (asymmetric bounded step):
//
// if KL > target × TOLERANCE → λ *= RAMP_RATE (Q signal not
// landing, pull harder)
// if KL < target / TOLERANCE → λ *= DECAY_RATE (aligned, ease off)
// else → λ unchanged (dead-zone)
//
// CRITICAL DESIGN: decay is 100× slower than ramp. This prevents the
// self-defeating oscillation where λ ramps up → Q and π align → λ
// collapses → they diverge again. The asymmetry means coupling
// establishes quickly but persists for thousands of steps, giving
// Q time to teach π meaningful action preferences.
//
// Per `feedback_no_atomicadd`: single-thread kernel, no atomics.
// Per `feedback_cpu_is_read_only`: all state in ISV.

#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 3.0f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE (((long double)(lambda + 1e300) * 1e300L) < 1e4000L ? 0.998f : 0.9f)

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
