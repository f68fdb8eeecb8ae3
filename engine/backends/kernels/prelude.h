// Shared HIP/CUDA dialect, prepended to every kernel source before hiprtc/nvrtc compiles it.
// No #include: neither compiler is given include paths, and hiprtc already provides the HIP built-ins.
#pragma once
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;
#define HALO_KERNEL extern "C" __global__
#define HALO_GLOBAL_ID (blockIdx.x * blockDim.x + threadIdx.x)
