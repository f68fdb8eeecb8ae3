// The launcher of tests/tools/cpu_simt.h: a block's threads as OS threads meeting at a barrier; blocks in turn.
#include <barrier>
#include <thread>
#include <vector>
#include <algorithm>
#include <atomic>
#include <memory>
struct halo_dim3 { unsigned x = 0, y = 0, z = 0; };
thread_local halo_dim3 threadIdx, blockIdx;
halo_dim3 blockDim, gridDim;
static std::barrier<>* block_barrier;
static std::vector<std::unique_ptr<std::barrier<>>>* warp_barriers;   // a warp's 32 threads (the last may be fewer)
static float* exchange;                     // one slot per thread: a shuffle's values
alignas(16) float halo_cpu_dynamic_shared[1 << 16];

void __syncthreads() { block_barrier->arrive_and_wait(); }
void __syncwarp() { (*warp_barriers)[threadIdx.x >> 5]->arrive_and_wait(); }
void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
float halo_cpu_shfl_xor(float v, int lane_mask) {   // every lane of the warp calls it (as __shfl_xor_sync's full mask)
    unsigned t = threadIdx.x;
    __syncwarp();                                    // the last shuffle's reads are done
    exchange[t] = v;
    __syncwarp();
    return exchange[(t & ~31u) | ((t & 31u) ^ (unsigned)lane_mask)];
}
#if defined(__clang__)
// v_wmma_f32_16x16x16_f16 (cpu_simt.h says the operand layout): the warp's operands meet in per-thread slots; D's
// element i of lane l is the f32 sum over k of A[row][k] B[k][col] (row 2 i + l / 16, col l % 16) plus C's. RDNA3
// reads A and B from lanes 0-15 and requires lanes 16-31 to repeat them: a kernel that does not is counted in
// halo_cpu_wmma_unreplicated, which the tests read.
typedef _Float16 halo_cpu_h16 __attribute__((ext_vector_type(16)));
typedef float halo_cpu_f8 __attribute__((ext_vector_type(8)));
static halo_cpu_h16 wmma_a[1024], wmma_b[1024];
extern "C" { long long halo_cpu_wmma_unreplicated = 0; }
halo_cpu_f8 __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(halo_cpu_h16 a, halo_cpu_h16 b, halo_cpu_f8 c) {
    unsigned t = threadIdx.x, base = t & ~31u, l = t & 31u;
    __syncwarp();
    wmma_a[t] = a;
    wmma_b[t] = b;
    __syncwarp();
    if (l >= 16)
        for (int k = 0; k < 16; k++)
            if (wmma_a[t][k] != wmma_a[t - 16][k] || wmma_b[t][k] != wmma_b[t - 16][k])
                __atomic_fetch_add(&halo_cpu_wmma_unreplicated, 1, __ATOMIC_RELAXED);
    halo_cpu_f8 d;
    for (int i = 0; i < 8; i++) {
        unsigned row = 2 * i + (l >> 4), col = l & 15;
        float s = c[i];
        for (int k = 0; k < 16; k++) s += (float)wmma_a[base + row][k] * (float)wmma_b[base + col][k];
        d[i] = s;
    }
    return d;
}
#endif
int __any_sync(unsigned, int p) { return p; }       // unused by the SIMT kernels the harness runs
unsigned __byte_perm(unsigned a, unsigned b, unsigned s) {
    unsigned long long x = ((unsigned long long)b << 32) | a, r = 0;
    for (int i = 0; i < 4; i++) r |= ((x >> (8 * ((s >> (4 * i)) & 7))) & 0xffull) << (8 * i);
    return (unsigned)r;
}
int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

// Runs kernel(args) over grid (gx, gy) of blocks of `threads` threads; `call` invokes the kernel with the packed
// arguments (generated per kernel by cpu_simt.py).
extern "C" void halo_cpu_launch(void (*call)(void**), void** args, unsigned gx, unsigned gy, unsigned threads) {
    gridDim = {gx, gy, 1};
    blockDim = {threads, 1, 1};
    std::vector<float> slots(threads);
    exchange = slots.data();
    for (unsigned by = 0; by < gy; by++)
        for (unsigned bx = 0; bx < gx; bx++) {
            std::barrier<> bar(threads);
            block_barrier = &bar;
            std::vector<std::unique_ptr<std::barrier<>>> warps;
            for (unsigned w = 0; w < (threads + 31) / 32; w++)
                warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, threads - 32 * w)));
            warp_barriers = &warps;
            std::vector<std::thread> pool;
            for (unsigned t = 0; t < threads; t++)
                pool.emplace_back([=] { threadIdx = {t, 0, 0}; blockIdx = {bx, by, 0}; call(args); });
            for (auto& th : pool) th.join();
        }
}
