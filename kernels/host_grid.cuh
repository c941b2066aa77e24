// host_grid.cuh — host only: run the controller as other threads of a grid.
//
// The single-thread rule: launched over any grid, only thread 0 of block 0 may
// change the ISV. The host backend appends this file after looped_harness.cuh;
// host_shim.h makes threadIdx/blockIdx/blockDim/gridDim thread-local variables,
// set here for one call each and restored afterwards. (On the GPU the cupy
// backend launches real grids instead.)
//
// coords is [n][6]: threadIdx.{x,y,z}, blockIdx.{x,y,z}; dims is blockDim.{x,y,z},
// gridDim.{x,y,z}. Call i runs the controller once on ISV row i ([n][RLQ_ISV_LEN]).
extern "C" void rlq_as_threads(float* isv, const unsigned int* coords, long long n, const unsigned int* dims) {
    for (long long i = 0; i < n; ++i) {
        const unsigned int* c = coords + 6 * i;
        threadIdx = rlq_host_dim3{c[0], c[1], c[2]};
        blockIdx = rlq_host_dim3{c[3], c[4], c[5]};
        blockDim = rlq_host_dim3{dims[0], dims[1], dims[2]};
        gridDim = rlq_host_dim3{dims[3], dims[4], dims[5]};
        RLQ_CONTROLLER(isv + i * RLQ_ISV_LEN);
    }
    threadIdx = rlq_host_dim3{0u, 0u, 0u};
    blockIdx = rlq_host_dim3{0u, 0u, 0u};
    blockDim = rlq_host_dim3{1u, 1u, 1u};
    gridDim = rlq_host_dim3{1u, 1u, 1u};
}
