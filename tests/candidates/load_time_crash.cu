// Host code that runs when the kernel's library is loaded (a constructor function that aborts).
// Not CUDA for NVRTC (no host code in JIT mode): exit 2. Without NVRTC the gate still survives it: its own
// process never loads a candidate, so it is an execution row (tests/test_execution.py checks that path).
// needs: nvrtc
// expect-exit: 2
// expect-text: host functions are not allowed in JIT mode
__attribute__((constructor)) static void on_load() { abort(); }

extern "C" __global__ void rl_q_distill_lambda_controller(float* isv) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    isv[486] = isv[486];
}
