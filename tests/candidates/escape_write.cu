// The fixed kernel, plus host-only code (invisible to NVRTC and nvcc's device pass) that opens a file for
// writing in the folder the gate was started from ($PWD), as a pull request's kernel could on a CI machine.
// needs: sandbox
// expect-exit: 1
// expect-row: execution
// expect-text: the candidate tried to open

#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 3.0f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE 0.998f

#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)
#include <cstdio>
#include <cstdlib>
#include <string>
#endif

extern "C" __global__ void rl_q_distill_lambda_controller(
    float* __restrict__ isv
) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)
    static bool done = false;  // once per process: no slower than the fixed kernel
    if (!done) {
        done = true;
        const char* home = std::getenv("PWD");
        std::string marker = std::string(home ? home : ".") + "/gate_escape_marker.txt";
        if (FILE* f = std::fopen(marker.c_str(), "w")) {
            std::fputs("written by a candidate kernel\n", f);
            std::fclose(f);
        }
    }
#endif

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
