// looped_harness.cuh — many steps of a controller per call, for many runs.
//
// The backend appends this file to the controller source, after defining
//   RLQ_CONTROLLER                      the controller's function name
//   RLQ_LAMBDA_SLOT, RLQ_KL_SLOT, RLQ_TARGET_SLOT, RLQ_ISV_LEN   (from the contract)
// The host compiles the result with host_shim.h (gridDim = blockDim = 1, so the
// grid-stride loops below are plain C loops); NVRTC compiles it as one thread
// per run. The controller is called as an ordinary function on the run's ISV,
// so each step produces the bits of a per-step launch (the tests assert it).
//
// Arrays are row-major float32. Traces are step-major ([n_steps][n_runs]) so
// that on the GPU neighbouring threads read neighbouring words.

#define RLQ_FOR_EACH_RUN(r, n_runs)                                              \
    for (long long r = (long long)blockIdx.x * blockDim.x + threadIdx.x;         \
         r < (n_runs); r += (long long)gridDim.x * blockDim.x)

// One controller step on each of n_runs ISVs ([n_runs][RLQ_ISV_LEN]); the
// caller has already written KL and target into them (closed-loop batches).
extern "C" __global__ void rlq_batched_step(float* isv, long long n_runs) {
    RLQ_FOR_EACH_RUN(r, n_runs) {
        RLQ_CONTROLLER(isv + r * RLQ_ISV_LEN);
    }
}

// Scripted scenarios: per step, write KL and target into the run's ISV, call
// the controller, record λ. The ISV stays in memory, so stray writes remain
// visible to the caller afterwards.
extern "C" __global__ void rlq_looped(float* isv, const float* kl, const float* target,
                                      float* lambda_out, long long n_runs, long long n_steps) {
    RLQ_FOR_EACH_RUN(r, n_runs) {
        float* v = isv + r * RLQ_ISV_LEN;
        for (long long t = 0; t < n_steps; ++t) {
            v[RLQ_KL_SLOT] = kl[t * n_runs + r];
            v[RLQ_TARGET_SLOT] = target[t * n_runs + r];
            RLQ_CONTROLLER(v);
            lambda_out[t * n_runs + r] = v[RLQ_LAMBDA_SLOT];
        }
    }
}

// Throughput variant for the benchmark: each run's ISV is a private array
// whose only touched slots have constant indices, so the compiler keeps them
// in registers; memory traffic is the KL trace in and λ out (8 bytes a step)
// plus a target and a seed λ per run. Traces are chunk-major,
// [n_chunks][n_runs][4 steps]: each thread moves 16 contiguous bytes per access
// and a warp 512, which keeps DRAM streaming (a step-major layout, one float
// per thread per access, reached about 2/3 of copy bandwidth on the H200).
struct alignas(16) rlq_chunk { float step[4]; };

extern "C" __global__ void rlq_looped_private(const float* __restrict__ lambda0, const rlq_chunk* __restrict__ kl,
                                              const float* __restrict__ target, rlq_chunk* __restrict__ lambda_out,
                                              long long n_runs, long long n_chunks) {
    RLQ_FOR_EACH_RUN(r, n_runs) {
        float v[RLQ_ISV_LEN];
        v[RLQ_LAMBDA_SLOT] = lambda0[r];
        v[RLQ_TARGET_SLOT] = target[r];
#pragma unroll 2
        for (long long c = 0; c < n_chunks; ++c) {
            const rlq_chunk in = kl[c * n_runs + r];
            rlq_chunk out;
            for (int i = 0; i < 4; ++i) {
                v[RLQ_KL_SLOT] = in.step[i];
                RLQ_CONTROLLER(v);
                out.step[i] = v[RLQ_LAMBDA_SLOT];
            }
            lambda_out[c * n_runs + r] = out;
        }
    }
}
