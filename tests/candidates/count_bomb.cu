// Counts its calls in a __device__ variable and spins for ever after 400 000 of them in one process: a hang
// that a fresh process would not show. A gate that re-ran a timed-out request in a new worker passed its
// execution row (a helper's review); each request now runs on in the worker that counted, and times out there
// (the text, on the host). The counter is state outside the ISV too: that row fails on every backend.
// expect-exit: 1
// expect-row: outside_state
// expect-text: timeout (no answer within

#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 3.0f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE 0.998f

__device__ unsigned long long g_calls = 0;

extern "C" __global__ void rl_q_distill_lambda_controller(
    float* __restrict__ isv
) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;

    const float kl_observed = isv[RL_Q_DISTILL_KL_EMA_INDEX];
    const float kl_target = isv[RL_Q_DISTILL_KL_TARGET_INDEX];
    float lambda = isv[RL_Q_DISTILL_LAMBDA_INDEX];
    const bool warming_up = false;
    g_calls = g_calls + 1u;
    if (g_calls > 400000ull) { for (volatile int spin = 0; spin >= 0; spin = spin | 1) {} }

    if (kl_observed <= 0.0f || kl_target <= 0.0f || lambda <= 0.0f) return;

    const float upper = kl_target * KL_TOLERANCE;
    const float lower = kl_target / KL_TOLERANCE;

    if (kl_observed > upper) {
        lambda = fminf(MAX_LAMBDA, lambda * LAMBDA_RAMP_RATE);
    } else if (kl_observed < lower && !warming_up) {
        lambda = fmaxf(MIN_LAMBDA, lambda * LAMBDA_DECAY_RATE);
    }

    isv[RL_Q_DISTILL_LAMBDA_INDEX] = lambda;
}
