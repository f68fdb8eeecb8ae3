// Shared HIP/CUDA dialect, prepended to every kernel source before hiprtc/nvrtc compiles it.
// No #include: neither compiler is given include paths, and hiprtc already provides the HIP built-ins.
#pragma once
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define HALO_KERNEL extern "C" __global__
#define HALO_GLOBAL_ID (blockIdx.x * blockDim.x + threadIdx.x)

// Programmatic dependent launch (CUDA sm_90+; the host launches every kernel with it there, see
// engine.backends.gpu.GpuBackend.programmatic). A kernel so launched may start while the kernel before it in
// the stream is still running, so every kernel entry opens with one of:
//   GRID_DEPENDENCY_SYNC();  lets the next kernel's blocks be scheduled (they wait in turn), then waits until
//                            the previous kernel has finished and its writes are visible. Nothing before it.
//   GRID_DEPENDENCY_LATER(); only the first half: the kernel touches nothing but its weights (read-only for
//                            the model's life) before it calls grid_dependency_wait() itself (the decode
//                            matvecs, which prefetch their rows into L2 while the previous kernel finishes).
// tests/backend/test_kernel_sources.py holds every entry to this. Elsewhere (HIP, older NVIDIA GPUs, a plain
// launch) both are no-ops and stream order alone orders the kernels.
#if !defined(__HIPCC_RTC__) && !defined(__HIP__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
__device__ __forceinline__ void grid_dependents_launch() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];" :: "l"(p)); }
#else
__device__ __forceinline__ void grid_dependents_launch() {}
__device__ __forceinline__ void grid_dependency_wait() {}
__device__ __forceinline__ void prefetch_l2(const void*) {}
#endif
#define GRID_DEPENDENCY_SYNC() (grid_dependents_launch(), grid_dependency_wait())
#define GRID_DEPENDENCY_LATER() grid_dependents_launch()

// Warp and block reductions shared by every kernel file. They assume 32-lane warps: NVIDIA GPUs and RDNA
// GPUs (gfx11xx, the Strix Halo's gfx1151 among them) run HIP in wave32; wave64 devices (CDNA) would need
// these and the kernels' lane arithmetic revisited.
#if defined(__HIPCC_RTC__) || defined(__HIP__) || defined(HALO_CPU_SIM)     // HALO_CPU_SIM: tests/tools/cpu_simt.h
#define SHFL_XOR(v, o) __shfl_xor(v, o)
#define SHFL_FROM(v, src) __shfl(v, src)
#else
#define SHFL_XOR(v, o) __shfl_xor_sync(0xffffffffu, v, o)
#define SHFL_FROM(v, src) __shfl_sync(0xffffffffu, v, src)
#endif
#define NEG_INF __int_as_float((int)0xff800000u)

__device__ __forceinline__ float warp_sum(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += SHFL_XOR(v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, SHFL_XOR(v, o));
    return v;
}

// Sum (MAX false) or maximum (MAX true) over the whole block; every thread gets the result. red: >= 32 floats of
// shared memory.
template <bool MAX>
__device__ float block_reduce(float v, float* red) {
    v = MAX ? warp_max(v) : warp_sum(v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = MAX ? NEG_INF : 0.0f;
    for (int i = 0; i < nw; i++) s = MAX ? fmaxf(s, red[i]) : s + red[i];
    return s;
}

__device__ __forceinline__ float block_sum(float v, float* red) { return block_reduce<false>(v, red); }
__device__ __forceinline__ float block_max(float v, float* red) { return block_reduce<true>(v, red); }

// The paged KV cache's slot of a sequence's position j: slot table[j / bs] * bs + j % bs of its block table (the
// attention kernels' rows, the sampler's token history). bs is a power of two (GpuKVCache refuses others): j / bs
// by a shift, where a division by a kernel argument cost ~15 instructions per key in the decode walkers.
__device__ __forceinline__ size_t kv_slot(const i32* table, int j, int bs) {
    return (size_t)table[j >> (__ffs(bs) - 1)] * bs + (j & (bs - 1));
}

// The KV cache's f16 elements (the _f16 builds of the attention kernels): IEEE half bits in an unsigned short,
// converted by the hardware (round to nearest even on the way in).
#if defined(__HIPCC_RTC__) || defined(__HIP__) || defined(HALO_CPU_SIM)
__device__ __forceinline__ float half_to_float(unsigned short h) { return (float)__builtin_bit_cast(_Float16, h); }
__device__ __forceinline__ unsigned short float_to_half(float f) {
    return __builtin_bit_cast(unsigned short, (_Float16)f);
}
#else
__device__ __forceinline__ float half_to_float(unsigned short h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}
__device__ __forceinline__ unsigned short float_to_half(float f) {
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}
#endif
__device__ __forceinline__ float kv_value(float x) { return x; }
__device__ __forceinline__ float kv_value(unsigned short h) { return half_to_float(h); }
__device__ __forceinline__ void kv_store(float* p, float x) { *p = x; }
__device__ __forceinline__ void kv_store(unsigned short* p, float x) { *p = float_to_half(x); }
// The largest |x| of four values
__device__ __forceinline__ float max_abs4(float4 v) {
    return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}
// Two floats as f16 heads and f16 tails packed in pairs (x = head + tail to ~22 bits, like tf32_split; a tail
// below f16's normal range still lands within 2^-25 of the rest): the float32-level operand of an f16 MMA that
// takes exact f16 values on its other side (an f16 KV cache, integer weight codes). Every build has it: HIP builds
// halo_split_f16, which writes such operands.
__device__ __forceinline__ void f16_split2(float x0, float x1, u32* head, u32* tail) {
    unsigned short h0 = float_to_half(x0), h1 = float_to_half(x1);
    unsigned short t0 = float_to_half(x0 - half_to_float(h0)), t1 = float_to_half(x1 - half_to_float(h1));
    *head = (u32)h0 | ((u32)h1 << 16);
    *tail = (u32)t0 | ((u32)t1 << 16);
}
// The exponent e that puts peak / 2^e in [2^14, 2^15) (peak > 0; 0 otherwise): the scaling of every f16 head + tail
// split (halo_split_f16's tokens, the WMMA tile's tiles, the prefill attention tile's K / V tiles and Q rows), so
// each value keeps 11 bits in its f16 head, ~22 with its tail, and none overflows f16.
__device__ __forceinline__ int f16_split_exponent(float peak) {
    int e = 0;
    if (peak > 0.0f) { frexpf(peak, &e); e -= 15; }  // peak = f 2^(e + 15), f in [0.5, 1)
    return e;
}
// the two f16 values of a 32-bit word (low half first) as floats
__device__ __forceinline__ void halves_to_floats(u32 w, float* v) {
    v[0] = half_to_float((unsigned short)(w & 0xffffu));
    v[1] = half_to_float((unsigned short)(w >> 16));
}
// 4 consecutive cache elements as floats (p 16-byte aligned for float, 8-byte for f16)
__device__ __forceinline__ void kv_load4(const float* p, float* v) {
    float4 x = *(const float4*)p;
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}
__device__ __forceinline__ void kv_load4(const unsigned short* p, float* v) {
    uint2 x = *(const uint2*)p;
    halves_to_floats(x.x, v);
    halves_to_floats(x.y, v + 2);
}
// 16 bytes of cache elements as floats: 4 floats or 8 f16 values (p 16-byte aligned)
__device__ __forceinline__ void kv_load16(const float* p, float* v) { kv_load4(p, v); }
__device__ __forceinline__ void kv_load16(const unsigned short* p, float* v) {
    uint4 x = *(const uint4*)p;
    halves_to_floats(x.x, v);
    halves_to_floats(x.y, v + 2);
    halves_to_floats(x.z, v + 4);
    halves_to_floats(x.w, v + 6);
}

// NVIDIA tensor cores with TF32 operands (sm_80 and newer), for the TF32 matmul tiles (halo_quant.cu). "3xTF32":
// every operand is split into a TF32 head and a TF32 tail (x = head + tail, both exact in 10 mantissa bits) and a*b
// is taken as al*bh + ah*bl + ah*bh, about 21 bits: float32 tolerances still hold. Fragment layouts of mma.m16n8k8
// (PTX ISA, "mma.m16n8k8 .tf32"), lane = 4 g + q: A (16 x 8, row-major) a0 = A[g][q], a1 = A[g + 8][q],
// a2 = A[g][q + 4], a3 = A[g + 8][q + 4]; B (8 x 8) b0 = B[q][g], b1 = B[q + 4][g]; C (16 x 8) c0 = C[g][2q],
// c1 = C[g][2q + 1], c2/c3: row g + 8.
// Elsewhere (HIP, older NVIDIA GPUs) HALO_TC is 0: the kernels that need it compile to nothing and the host
// never launches them.
// HALO_CPU_SIM_TC: tests/tools/cpu_simt.h runs this code on the CPU, with its own versions of the instructions
// (the functions under "HALO_TC && !defined(HALO_CPU_SIM)").
#if (!defined(__HIPCC_RTC__) && !defined(__HIP__) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || \
    defined(HALO_CPU_SIM_TC)
#define HALO_TC 1
#else
#define HALO_TC 0
#endif

#if HALO_TC && !defined(HALO_CPU_SIM)
__device__ __forceinline__ u32 tf32_round(float x) {
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
}

#endif
#if HALO_TC
__device__ __forceinline__ void tf32_split(float x, u32* head, u32* tail) {
    *head = tf32_round(x);
    *tail = tf32_round(x - __uint_as_float(*head));
}

#endif
#if HALO_TC && !defined(HALO_CPU_SIM)
// c[0..3] += A (16 x 8, row-major fragment a[0..3]) * B (8 x 8, column fragment b0, b1)
__device__ __forceinline__ void mma_tf32(float* c, const u32* a, u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// f16 operands, mma.m16n8k16 with float32 accumulators (PTX ISA, "mma.m16n8k16 .f16"): each register holds two
// f16 elements, the lower index in the low half. A (16 x 16, row-major) a0 = A[g][2q, 2q+1], a1 = A[g + 8][2q, 2q+1],
// a2 = A[g][2q+8, 2q+9], a3 = A[g + 8][2q+8, 2q+9]; B (16 x 8) b0 = B[2q, 2q+1][g], b1 = B[2q+8, 2q+9][g]; C as above.
// Not volatile: the compiler may interleave independent MMAs with other work (it cannot reorder volatile asm).
__device__ __forceinline__ void mma_f16(float* c, u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// 2^x on the special-function unit, a result below float32's normal range flushed to 0. The tiled attention keeps
// its scores in log2 units (Q carries log2 e with the softmax scale), so each exponent of its online softmax is one
// subtraction and this; __expf there was a multiply by log2 e and a fix-up for denormal results as well.
__device__ __forceinline__ float exp2_ftz(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

#endif
#if HALO_TC && !defined(HALO_CPU_SIM)
// Shared memory by its 32-bit shared-window address (cp.async, ldmatrix)
__device__ __forceinline__ u32 smem_addr(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// A shared-memory operand of cp.async / ldmatrix by its shared-window address: a tile computes each lane's
// addresses once and offsets them in bytes (run 20: the generic-pointer forms below cost a 64-bit add and a
// conversion per use, ~1/6 of the tch stage's instructions). The CPU harness's saddr is a char pointer.
typedef u32 saddr;
__device__ __forceinline__ saddr shared_addr(const void* p) { return smem_addr(p); }

// 16 bytes global -> shared, asynchronously; bytes == 0 writes zeros (tokens past T)
__device__ __forceinline__ void cp_async16_at(saddr dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int bytes) {
    cp_async16_at(smem_addr(dst), src, bytes);
}
// 4 bytes global -> shared, asynchronously (through L1: the 4-byte form has only .ca); bytes == 0 writes zeros
__device__ __forceinline__ void cp_async4_at(saddr dst, const void* src, int bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

// Four 8 x 8 matrices of 16-bit elements from shared memory: lanes 8i .. 8i + 7 give the 8 row addresses (16 bytes
// each) of matrix i; lane (g, q) receives r[i] = matrix i's row g, elements 2q, 2q + 1 (or, transposed, column g's
// rows 2q, 2q + 1): f16 MMA fragments (row-major A, or a row-major [k][n] B read transposed).
__device__ __forceinline__ void ldmatrix_x4_at(u32* r, saddr row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans_at(u32* r, saddr row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(row) : "memory");
}

// f16x2 arithmetic on packed pairs (the tch tile's integer weight codes: exact)
__device__ __forceinline__ u32 f16x2_sub(u32 a, u32 b) {
    u32 r;
    asm("sub.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ u32 f16x2_mul(u32 a, u32 b) {
    u32 r;
    asm("mul.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
#endif
