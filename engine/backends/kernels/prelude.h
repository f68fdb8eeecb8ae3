// Shared HIP/CUDA dialect, prepended to every kernel source before hiprtc/nvrtc compiles it.
// No #include: neither compiler is given include paths, and hiprtc already provides the HIP built-ins.
#pragma once
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define HALO_KERNEL extern "C" __global__
#define HALO_GLOBAL_ID (blockIdx.x * blockDim.x + threadIdx.x)

// Warp and block reductions shared by every kernel file. They assume 32-lane warps: NVIDIA GPUs and RDNA
// GPUs (gfx11xx, the Strix Halo's gfx1151 among them) run HIP in wave32; wave64 devices (CDNA) would need
// these and the kernels' lane arithmetic revisited.
#if defined(__HIPCC_RTC__) || defined(__HIP__)
#define SHFL_XOR(v, o) __shfl_xor(v, o)
#else
#define SHFL_XOR(v, o) __shfl_xor_sync(0xffffffffu, v, o)
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

// Sum over the whole block; every thread gets the result. red: >= 32 floats of shared memory.
__device__ float block_sum(float v, float* red) {
    v = warp_sum(v);
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = (blockDim.x + 31) >> 5;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += red[i];
    return s;
}
