// host_shim.h — force-included (g++ -include) when the host backend compiles a
// .cu controller as plain C++. It maps the few CUDA spellings a one-thread
// controller uses onto standard C++ so that every CPU-only machine runs the
// exact kernel source. Float semantics stay IEEE: the backend compiles with
// -O2 -ffp-contract=off and never -ffast-math, and fminf/fmaxf are C's, which
// (like CUDA's) return the non-NaN operand.
#pragma once
#include <math.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))

struct rlq_host_dim3 { unsigned int x, y, z; };
// A one-block, one-thread launch: the only grid the host backend models.
static const rlq_host_dim3 threadIdx = {0u, 0u, 0u};
static const rlq_host_dim3 blockIdx = {0u, 0u, 0u};
static const rlq_host_dim3 blockDim = {1u, 1u, 1u};
static const rlq_host_dim3 gridDim = {1u, 1u, 1u};
