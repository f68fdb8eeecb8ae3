// The CUDA/HIP dialect of engine/backends/kernels on the CPU, for tests (tests/tools/cpu_simt.py): a kernel source
// compiles as C++ and its blocks run one after another, each block's threads as OS threads. Enough for SIMT kernels
// whose threads meet only at __syncthreads and whose shuffles every thread of the block reaches together (the
// harness exchanges through the whole block); tensor-core code stays out (HALO_TC is 0 here as on HIP).
// __shared__ variables are statics: one block runs at a time, so they are that block's.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
using std::max;
using std::min;
struct halo_dim3 { unsigned x = 0, y = 0, z = 0; };
extern thread_local halo_dim3 threadIdx, blockIdx;
extern halo_dim3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct uint2 { unsigned x, y; };
struct uint4 { unsigned x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
inline uint2 make_uint2(unsigned a, unsigned b) { return {a, b}; }
inline float __expf(float x) { return std::exp(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
inline float __uint_as_float(unsigned i) { float f; std::memcpy(&f, &i, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned i; std::memcpy(&i, &f, 4); return i; }
extern float halo_cpu_dynamic_shared[];      // a kernel's extern __shared__ array (cpu_simt.py rewrites it)
void __syncthreads();
void __syncwarp();
void __threadfence();
float halo_cpu_shfl_xor(float v, int lane_mask);
float halo_cpu_shfl(float v, int src_lane);
inline float __shfl_xor(float v, int lane_mask) { return halo_cpu_shfl_xor(v, lane_mask); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) { return halo_cpu_shfl_xor(v, lane_mask); }
inline float __shfl_sync(unsigned, float v, int src_lane) { return halo_cpu_shfl(v, src_lane); }
inline float __shfl(float v, int src_lane) { return halo_cpu_shfl(v, src_lane); }
inline int __ffs(int x) { return __builtin_ffs(x); }
int __any_sync(unsigned, int p);
inline int __all_sync(unsigned m, int p) { return !__any_sync(m, !p); }
template <typename T> inline T __ldg(const T* p) { return *p; }
unsigned __byte_perm(unsigned a, unsigned b, unsigned s);
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (shift & 31u));
}
int atomicAdd(int* p, int v);
unsigned atomicAdd(unsigned* p, unsigned v);
#if defined(__clang__)
// RDNA3's v_wmma_f32_16x16x16_f16 (wave32), as AMD documents its operands: lane l holds row l % 16 of A and
// column l % 16 of B (k 0..15; lanes 16-31 repeat lanes 0-15), and D element i of lane l is row 2 i + l / 16,
// column l % 16. Every lane of the warp calls it.
typedef _Float16 halo_cpu_h16 __attribute__((ext_vector_type(16)));
typedef float halo_cpu_f8 __attribute__((ext_vector_type(8)));
halo_cpu_f8 __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(halo_cpu_h16 a, halo_cpu_h16 b, halo_cpu_f8 c);
#endif

#if defined(HALO_CPU_SIM_TC)
// NVIDIA's warp-level tensor-core instructions as the PTX ISA defines them (prelude.h's comments give the fragment
// layouts), for the HALO_TC kernels: every lane of the warp calls each. cp.async copies at once (its waits are
// no-ops: the data is there before the barrier that follows them).
unsigned tf32_round(float x);
void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1);
void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1);
unsigned f16x2_sub(unsigned a, unsigned b);
unsigned f16x2_mul(unsigned a, unsigned b);
void cp_async16(void* dst, const void* src, int bytes);
inline void cp_async_commit() {}
inline void cp_async_wait_all() {}
void ldmatrix_x4(unsigned* r, const void* row);
void ldmatrix_x4_trans(unsigned* r, const void* row);
typedef char* saddr;                          // prelude.h's shared-window address: here a plain pointer
inline saddr shared_addr(const void* p) { return (char*)p; }
inline void cp_async16_at(saddr dst, const void* src, int bytes) { cp_async16(dst, src, bytes); }
inline void cp_async4_at(saddr dst, const void* src, int bytes) {                    // bytes 0: a zero
    float v = bytes ? *(const float*)src : 0.0f;
    *(float*)dst = v;
}
inline void ldmatrix_x4_at(unsigned* r, saddr row) { ldmatrix_x4(r, row); }
inline void ldmatrix_x4_trans_at(unsigned* r, saddr row) { ldmatrix_x4_trans(r, row); }
inline float exp2_ftz(float x) {                                                   // ex2.approx.ftz.f32
    float r = std::exp2(x);
    return std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}
#endif
