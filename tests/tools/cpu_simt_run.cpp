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
