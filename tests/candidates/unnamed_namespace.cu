// Uncallable: extern "C" inside an unnamed namespace is internal, and NVRTC mangles an internal kernel's name
// (its PTX entry is _ZN…_GLOBAL__N_…), so production cannot launch it by name: exit 2, one line.
// expect-exit: 2
// expect-text: unnamed namespace
namespace {
extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    isv[486] = fminf(1.0f, isv[486] * 1.2f);
}
}  // namespace
