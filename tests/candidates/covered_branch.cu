// A new branch the gate's scenarios reach (λ = +inf is one of the non-finite cases): full coverage.
// gate-args: --require-coverage
// expect-exit: 0
extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float kl = isv[488], target = isv[491];
    float lambda = isv[486];
    if (kl <= 0.0f || target <= 0.0f || lambda <= 0.0f) return;
    if (kl > target * 3.0f) {
        lambda = fminf(1.0f, lambda * 1.2f);
    } else if (kl < target / 3.0f) {
        lambda = fmaxf(0.05f, lambda * 0.998f);
    }
    if (lambda > 3.0e38f) {
        isv[486] = lambda;
        return;
    }
    isv[486] = lambda;
}
