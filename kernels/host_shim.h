// host_shim.h — force-included (g++ -include) when the host backend compiles a
// .cu controller as plain C++. It maps the CUDA spellings a controller author
// writes onto standard C++ so that every CPU-only machine runs the exact kernel
// source. Float semantics stay IEEE: the backend compiles with -ffp-contract=off
// and never -ffast-math (x86-64 and AArch64 evaluate float in float), so a*b,
// a+b, a/b round exactly as CUDA's __fmul_rn, __fadd_rn, __fdiv_rn do.
// kernels/host_include/ (on the include path) holds empty stand-ins for the
// CUDA headers (cuda_runtime.h, cuda.h) and the CUDART_* constants.
#pragma once
#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmath>
// libstdc++ spells __attribute__((__noinline__)) in shared_ptr_base.h (GCC 12+) and basic_string.h (GCC 13+):
// where the controller includes a C++ standard header (the host backend defines RLQ_HOST_CXX_HEADERS then),
// they are read before __noinline__ becomes a macro below, so its #include still compiles. Others skip
// them: about 50 ms a build.
#ifdef RLQ_HOST_CXX_HEADERS
#include <memory>
#include <string>
#endif

#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __shared__ static
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)

struct rlq_host_dim3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};
// The launch coordinates the controller sees. Thread-local and settable: the
// looped harness runs as thread 0 of a one-thread launch (these defaults), and
// the host grid harness (host_grid.cuh) sets them to play other threads.
static thread_local rlq_host_dim3 threadIdx = {0u, 0u, 0u};
static thread_local rlq_host_dim3 blockIdx = {0u, 0u, 0u};
static thread_local rlq_host_dim3 blockDim = {1u, 1u, 1u};
static thread_local rlq_host_dim3 gridDim = {1u, 1u, 1u};
// Not a constant expression, as on the GPU (a built-in variable there): a template keyed on it (SFINAE on
// sizeof(char[warpSize])) would otherwise pick one overload on the host and another on the device. A call, not a
// variable: the library keeps no data object of the shim's (outside_state reads the candidate's own).
static inline int rlq_warp_size() { return 32; }
#define warpSize (rlq_warp_size())

// One thread runs at a time: barriers and fences have nothing to order.
static inline void __syncthreads() {}
static inline void __syncwarp(unsigned = 0xffffffffu) {}
static inline void __threadfence() {}
static inline void __threadfence_block() {}
template <typename T> static inline T __ldg(const T* p) { return *p; }
// __trap() ends the kernel with an error: on the host, SIGABRT (the gate's execution row).
static inline void __trap() { abort(); }
// Atomics compile (one thread runs at a time, so they are plain read-modify-writes);
// the static rules (NVRTC's PTX) flag them: the kernel promises none.
template <typename T> static inline T atomicAdd(T* p, T v) { T old = *p; *p = old + v; return old; }
template <typename T> static inline T atomicExch(T* p, T v) { T old = *p; *p = v; return old; }
template <typename T> static inline T atomicMax(T* p, T v) { T old = *p; *p = old > v ? old : v; return old; }
template <typename T> static inline T atomicMin(T* p, T v) { T old = *p; *p = old < v ? old : v; return old; }
template <typename T> static inline T atomicCAS(T* p, T cmp, T v) { T old = *p; if (old == cmp) *p = v; return old; }

// Correctly rounded float arithmetic: C's operators under -ffp-contract=off.
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return std::sqrt(a); }
static inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }  // one rounding
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
// fmaf, fminf, fmaxf, copysignf, fabsf, sqrtf come from <math.h>: glibc's fmaf
// is a true fused multiply-add, and fminf/fmaxf (like CUDA's) return the
// non-NaN operand.
// CUDA's saturate clamps to [+0, 1] and maps NaN to +0 (PTX cvt.sat).
static inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }

// CUDA's overloaded max/min: the float ones are fmaxf/fminf (the non-NaN operand).
static inline float max(float a, float b) { return fmaxf(a, b); }
static inline float min(float a, float b) { return fminf(a, b); }
static inline double max(double a, double b) { return fmax(a, b); }
static inline double min(double a, double b) { return fmin(a, b); }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }

// Float to integer as the GPU's cvt does: the named rounding, NaN to 0, saturated at the type's range.
static inline int rlq_f2i(float r) {
    return r != r ? 0 : r >= 2147483648.0f ? INT_MAX : r <= -2147483648.0f ? INT_MIN : (int)r;
}
static inline unsigned int rlq_f2u(float r) { return r != r || r <= 0.0f ? 0u : r >= 4294967296.0f ? UINT_MAX : (unsigned int)r; }
static inline int __float2int_rn(float x) { return rlq_f2i(nearbyintf(x)); }  // default mode: to nearest even
static inline int __float2int_rz(float x) { return rlq_f2i(truncf(x)); }
static inline int __float2int_rd(float x) { return rlq_f2i(floorf(x)); }
static inline int __float2int_ru(float x) { return rlq_f2i(ceilf(x)); }
static inline unsigned int __float2uint_rn(float x) { return rlq_f2u(nearbyintf(x)); }
static inline unsigned int __float2uint_rz(float x) { return rlq_f2u(truncf(x)); }
static inline float __int2float_rn(int i) { return (float)i; }
static inline float __uint2float_rn(unsigned int u) { return (float)u; }

// Integer bit intrinsics.
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned int __brev(unsigned int x) {
    unsigned int r = 0;
    for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}

// Bit casts.
static inline unsigned int __float_as_uint(float x) { unsigned int u; memcpy(&u, &x, 4); return u; }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned int u) { float x; memcpy(&x, &u, 4); return x; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
static inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }

// Approximate intrinsics: the GPU computes these with reduced accuracy, the host
// with the C library's function, so CPU and GPU may differ in the last bits.
// The gate says so when a candidate calls one (KernelSource.approximate_intrinsics).
// glibc declares some of these names itself, so they are macros for rlq_* functions.
static inline float rlq_expf(float x) { return expf(x); }
static inline float rlq_exp10f(float x) { return powf(10.0f, x); }
static inline float rlq_logf(float x) { return logf(x); }
static inline float rlq_log2f(float x) { return log2f(x); }
static inline float rlq_log10f(float x) { return log10f(x); }
static inline float rlq_powf(float x, float y) { return powf(x, y); }
static inline float rlq_sinf(float x) { return sinf(x); }
static inline float rlq_cosf(float x) { return cosf(x); }
static inline float rlq_tanf(float x) { return tanf(x); }
static inline void rlq_sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
static inline float rlq_fdividef(float a, float b) { return a / b; }
static inline float rlq_frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
static inline float rlq_rsqrtf(float x) { return 1.0f / sqrtf(x); }
#define __expf rlq_expf
#define __exp10f rlq_exp10f
#define __logf rlq_logf
#define __log2f rlq_log2f
#define __log10f rlq_log10f
#define __powf rlq_powf
#define __sinf rlq_sinf
#define __cosf rlq_cosf
#define __tanf rlq_tanf
#define __sincosf rlq_sincosf
#define __fdividef rlq_fdividef
#define __frsqrt_rn rlq_frsqrt_rn
#define rsqrtf rlq_rsqrtf
