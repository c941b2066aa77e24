// The fixed kernel, plus host-only code (invisible to NVRTC and nvcc's device pass) that writes a reply of its
// own into the worker's pipe to the gate: a pickle naming a function (here the harmless posix.getpid; posix.system
// ran a shell as the gate's user when replies were unpickled). Replies are plain data now (repro/runners/plain.py):
// a pickle is no JSON. A well-formed forged reply would still be read as measured (DESIGN.md: what the gate does
// not defend against).
// needs: sandbox
// expect-exit: 1
// expect-row: execution
// expect-text: the candidate tried to write its own reply to the gate (not a JSON message

#define RL_Q_DISTILL_LAMBDA_INDEX 486
#define RL_Q_DISTILL_KL_EMA_INDEX 488
#define RL_Q_DISTILL_KL_TARGET_INDEX 491

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f
#define KL_TOLERANCE 3.0f
#define LAMBDA_RAMP_RATE 1.2f
#define LAMBDA_DECAY_RATE 0.998f

#if !defined(__CUDACC_RTC__) && !defined(__CUDA_ARCH__)
#include <sys/stat.h>
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
        static const char reply[] = "cposix\ngetpid\n)R.";  // protocol 0: posix.getpid()
        const unsigned n = sizeof(reply) - 1;
        const unsigned char length[4] = {0, 0, 0, (unsigned char)n};  // multiprocessing's big-endian length
        for (int fd = 3; fd < 64; ++fd) {  // the pipe is the worker's one socket
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) {
                if (write(fd, length, 4) == 4) (void)!write(fd, reply, n);
            }
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
