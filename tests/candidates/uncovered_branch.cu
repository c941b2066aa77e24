// A new branch no scenario reaches (a target of exactly 12345): passes, but not with --require-coverage.
// gate-args: --require-coverage
// expect-exit: 1
// expect-row: coverage
// expect-text: lines never run: 11
extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const float kl = isv[488], target = isv[491];
    float lambda = isv[486];
    if (target == 12345.0f) {
        lambda = 0.5f;
    } else if (kl <= 0.0f || target <= 0.0f || lambda <= 0.0f) {
        return;
    } else if (kl > target * 3.0f) {
        lambda = fminf(1.0f, lambda * 1.2f);
    } else if (kl < target / 3.0f) {
        lambda = fmaxf(0.05f, lambda * 0.998f);
    }
    isv[486] = lambda;
}
