// Refactor: constants in __constant__ memory, slots as an enum, cuda.h and math_constants.h.
// expect-exit: 0
#include <cuda.h>
#include <math_constants.h>

enum Slot { LAMBDA = 486, KL = 488, TARGET = 491 };
__constant__ float kBounds[2] = {0.05f, 1.0f};
__constant__ float kRates[2] = {1.2f, 0.998f};
__constant__ float kTolerance = 3.0f;

extern "C" __global__ void __launch_bounds__(1, 1) rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float kl = isv[KL], target = isv[TARGET];
    float lambda = isv[LAMBDA];
    if (kl <= CUDART_ZERO_F || target <= CUDART_ZERO_F || lambda <= CUDART_ZERO_F) return;
    if (kl > target * kTolerance) {
        lambda = fminf(kBounds[1], lambda * kRates[0]);
    } else if (kl < target / kTolerance) {
        lambda = fmaxf(kBounds[0], lambda * kRates[1]);
    }
    isv[LAMBDA] = lambda;
}
