// Refactor with an approximate intrinsic: exact on the host (a/b), possibly not on the GPU.
// The gate passes on the host and says that CPU and GPU may differ in the last bits.
// expect-exit: 0
// expect-text: approximate intrinsics __fdividef (line 12)
extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float kl = isv[488], target = isv[491];
    float lambda = isv[486];
    if (kl <= 0.0f || target <= 0.0f || lambda <= 0.0f) return;
    if (kl > target * 3.0f) {
        lambda = fminf(1.0f, lambda * 1.2f);
    } else if (kl < __fdividef(target, 3.0f)) {
        lambda = fmaxf(0.05f, lambda * 0.998f);
    }
    isv[486] = lambda;
}
