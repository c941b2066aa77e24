// The fixed kernel, plus host-only code that makes the folder the gate was started from writable by everyone
// through fchmodat2 (Linux 6.6; a call libseccomp 2.5.4 does not know by name): a metadata change outside the
// scratch folder, which Landlock does not cover (a reviewer's chmod 0777 of a file as root went through).
// needs: sandbox
// expect-exit: 1
// expect-row: execution
// expect-text: the candidate tried to make the system call
#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 3.0f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE 0.998f

#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)
#include <cstdlib>
#include <unistd.h>
#endif

extern "C" __global__ void rl_q_distill_lambda_controller(
    float* __restrict__ isv
) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)
    static bool done = false;  // once per process: no slower than the fixed kernel
    if (!done) {
        done = true;
        const char* pwd = std::getenv("PWD");
        if (pwd) (void)syscall(452L, -100L, pwd, 0777L, 0L);  // fchmodat2(AT_FDCWD, $PWD, 0777, 0)
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
