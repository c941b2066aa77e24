// Valid C++ for the host, not CUDA for NVRTC (no C++ standard library headers there): exit 2.
// needs: nvrtc
// expect-exit: 2
// expect-text: does not compile (NVRTC)
#include <algorithm>
extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    isv[486] = std::min(1.0f, isv[486] * 1.2f);
}
