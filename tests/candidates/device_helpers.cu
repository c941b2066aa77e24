// Refactor: __device__/__host__ __device__/__forceinline__/__noinline__ helpers, a template,
// __ldg, __syncthreads, #pragma unroll and a guard written with blockDim/gridDim.
// expect-exit: 0

template <typename T>
__host__ __device__ __forceinline__ T at_least(T lo, T x) { return fmaxf(lo, x); }

__device__ __noinline__ float scaled(float lambda, float rate) { return lambda * rate; }

__device__ __forceinline__ bool positive3(const float v[3]) {
    bool ok = true;
#pragma unroll
    for (int i = 0; i < 3; ++i) ok = ok && !(v[i] <= 0.0f);  // NaN passes, as in the fixed kernel
    return ok;
}

extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    const unsigned int global_id = blockIdx.x * blockDim.x + threadIdx.x;
    if (global_id != 0u) return;
    const float v[3] = {__ldg(isv + 488), __ldg(isv + 491), __ldg(isv + 486)};
    __syncthreads();
    if (!positive3(v)) return;
    const float kl = v[0], target = v[1];
    float lambda = v[2];
    if (kl > target * 3.0f) {
        lambda = fminf(1.0f, scaled(lambda, 1.2f));
    } else if (kl < target / 3.0f) {
        lambda = at_least(0.05f, scaled(lambda, 0.998f));
    }
    isv[486] = lambda;
}
