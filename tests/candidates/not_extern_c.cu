// Uncallable: without extern "C" the kernel's name is mangled, so it cannot be launched by name.
// expect-exit: 2
// expect-text: is not extern "C"
__global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    isv[486] = fminf(1.0f, isv[486] * 1.2f);
}
