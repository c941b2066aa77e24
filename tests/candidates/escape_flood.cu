// The fixed kernel, plus host-only code that promises the gate a reply of 2^40 bytes through the worker's pipe and
// streams them: the gate collected them for a frame's grace and reached 1.2 GB (a reviewer's second round). A
// length past the largest reply a worker sends (plain.REPLY_MAX) is no reply now.
// needs: sandbox
// expect-exit: 1
// expect-row: execution
// expect-text: the candidate tried to write its own reply to the gate (a message of 1099511627776 bytes)

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
        // multiprocessing's long form: -1, then an 8-byte big-endian length (2^40), then bytes for as long as it takes
        const unsigned char length[12] = {0xff, 0xff, 0xff, 0xff, 0, 0, 1, 0, 0, 0, 0, 0};
        static char chunk[1 << 16];
        for (int fd = 3; fd < 64; ++fd) {  // the pipe is the worker's one socket
            struct stat st;
            if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && write(fd, length, 12) == 12) {
                while (write(fd, chunk, sizeof chunk) > 0) {}
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
