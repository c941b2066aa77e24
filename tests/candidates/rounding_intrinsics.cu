// Refactor: float intrinsics with defined rounding (__fmul_rn, __fdiv_rn, __fadd_rn, fmaf,
// __float_as_uint, __uint_as_float, copysignf): the same bits as the plain operators.
// expect-exit: 0

__device__ __forceinline__ bool guard_passes(float x) {
    // Not <= 0: NaN passes (as in the fixed kernel); a zero of either sign does not.
    const unsigned int magnitude = __float_as_uint(x) & 0x7fffffffu;
    return magnitude != 0u && !(x < 0.0f);
}

extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float kl = isv[488], target = isv[491];
    float lambda = isv[486];
    if (!guard_passes(kl) || !guard_passes(target) || !guard_passes(lambda)) return;
    const float upper = __fmul_rn(target, 3.0f);
    const float lower = __fdiv_rn(target, __fadd_rn(2.0f, 1.0f));
    if (kl > upper) {
        lambda = fminf(__uint_as_float(0x3f800000u), fmaf(lambda, 1.2f, 0.0f));
    } else if (kl < lower) {
        lambda = fmaxf(copysignf(0.05f, 1.0f), __fmul_rn(lambda, 0.998f));
    }
    isv[486] = lambda;
}
