// A refactor of the fixed kernel that must pass bit for bit: the runtime header,
// __launch_bounds__ and line breaks between __global__ and the name.
// expect-exit: 0
#include <cuda_runtime.h>

#define MIN_LAMBDA 0.05f
#define MAX_LAMBDA 1.0f

extern "C"
__global__
__launch_bounds__(1)
void
rl_q_distill_lambda_controller(float* __restrict__ isv)
{
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float kl_observed = isv[488];
    const float kl_target = isv[491];
    float lambda = isv[486];
    if (kl_observed <= 0.0f || kl_target <= 0.0f || lambda <= 0.0f) return;
    const float upper = kl_target * 3.0f;
    const float lower = kl_target / 3.0f;
    if (kl_observed > upper) {
        lambda = fminf(MAX_LAMBDA, lambda * 1.2f);
    } else if (kl_observed < lower) {
        lambda = fmaxf(MIN_LAMBDA, lambda * 0.998f);
    }
    isv[486] = lambda;
}
