// The launcher of tests/tools/cpu_simt.h: a block's threads as OS threads meeting at a barrier; blocks in turn.
#include <barrier>
#include <thread>
#include <vector>
#include <cstring>
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
// a warp's lanes exchange through per-thread slots: write, meet, read (the meeting before the write keeps the last
// exchange's reads ahead of this one's writes)
struct Slot { unsigned w[8]; const void* p; float f; };
static Slot slots_[1024];
static void warp_post(const Slot& mine) {
    __syncwarp();
    slots_[threadIdx.x] = mine;
    __syncwarp();
}
static const Slot& lane_slot(unsigned lane) { return slots_[(threadIdx.x & ~31u) | lane]; }

float halo_cpu_shfl(float v, int src_lane) {
    Slot s{}; s.f = v;
    warp_post(s);
    return lane_slot((unsigned)src_lane & 31u).f;
}
int __any_sync(unsigned, int p) {
    Slot s{}; s.w[0] = p != 0;
    warp_post(s);
    int any = 0;
    for (unsigned l = 0; l < 32 && (threadIdx.x & ~31u) + l < blockDim.x; l++) any |= lane_slot(l).w[0];
    return any;
}

#if defined(HALO_CPU_SIM_TC)
static float bits_float(unsigned u) { float f; std::memcpy(&f, &u, 4); return f; }
static unsigned float_bits(float f) { unsigned u; std::memcpy(&u, &f, 4); return u; }
static float half_at(unsigned w, int hi) {
    unsigned short h = (unsigned short)(hi ? w >> 16 : w & 0xffffu);
    _Float16 x; std::memcpy(&x, &h, 2);
    return (float)x;
}
static unsigned half_bits(float f) { _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h; }

unsigned tf32_round(float x) {                 // cvt.rna.tf32.f32: 10 mantissa bits, ties away from zero
    unsigned u = float_bits(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & ~0x1fffu;
}
// mma.m16n8k8 .tf32: A[g][q] = a0, A[g + 8][q] = a1, A[g][q + 4] = a2, A[g + 8][q + 4] = a3; B[q][g] = b0,
// B[q + 4][g] = b1; lane 4 g + q's C is (g, 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1)
void mma_tf32(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    Slot s{}; s.w[0] = a[0]; s.w[1] = a[1]; s.w[2] = a[2]; s.w[3] = a[3]; s.w[4] = b0; s.w[5] = b1;
    warp_post(s);
    unsigned l = threadIdx.x & 31u, g = l >> 2, q = l & 3u;
    auto A = [](unsigned row, unsigned k) {
        const Slot& o = lane_slot((row & 7u) * 4 + (k & 3u));
        return bits_float(o.w[(row >= 8 ? 1 : 0) + (k >= 4 ? 2 : 0)] & ~0x1fffu);
    };
    auto B = [](unsigned k, unsigned n) { return bits_float(lane_slot(n * 4 + (k & 3u)).w[k >= 4 ? 5 : 4] & ~0x1fffu); };
    for (int e = 0; e < 4; e++) {
        unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * q + (e & 1);
        float acc = c[e];
        for (unsigned k = 0; k < 8; k++) acc += A(row, k) * B(k, col);
        c[e] = acc;
    }
}
// mma.m16n8k16 .f16 (two f16 a register, the lower index in the low half): A[g][2q, 2q + 1] = a0, A[g + 8][..] =
// a1, A[g][2q + 8, 2q + 9] = a2, A[g + 8][..] = a3; B[2q, 2q + 1][g] = b0, B[2q + 8, 2q + 9][g] = b1; C as tf32's
void mma_f16(float* c, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1) {
    Slot s{}; s.w[0] = a0; s.w[1] = a1; s.w[2] = a2; s.w[3] = a3; s.w[4] = b0; s.w[5] = b1;
    warp_post(s);
    unsigned l = threadIdx.x & 31u, g = l >> 2, q = l & 3u;
    auto A = [](unsigned row, unsigned k) {
        const Slot& o = lane_slot((row & 7u) * 4 + ((k & 7u) >> 1));
        return half_at(o.w[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1u);
    };
    auto B = [](unsigned k, unsigned n) { return half_at(lane_slot(n * 4 + ((k & 7u) >> 1)).w[k >= 8 ? 5 : 4], k & 1u); };
    for (int e = 0; e < 4; e++) {
        unsigned row = g + (e >= 2 ? 8 : 0), col = 2 * q + (e & 1);
        float acc = c[e];
        for (unsigned k = 0; k < 16; k++) acc += A(row, k) * B(k, col);
        c[e] = acc;
    }
}
unsigned f16x2_sub(unsigned a, unsigned b) {
    return half_bits(half_at(a, 0) - half_at(b, 0)) | half_bits(half_at(a, 1) - half_at(b, 1)) << 16;
}
unsigned f16x2_mul(unsigned a, unsigned b) {
    return half_bits(half_at(a, 0) * half_at(b, 0)) | half_bits(half_at(a, 1) * half_at(b, 1)) << 16;
}
void cp_async16(void* dst, const void* src, int bytes) {     // bytes < 16: the rest zero-filled (src-size)
    if (bytes > 0) std::memcpy(dst, src, bytes);
    std::memset((char*)dst + bytes, 0, 16 - bytes);
}
// ldmatrix .x4: lanes 8 i .. 8 i + 7 give matrix i's row addresses; lane 4 g + q gets matrix i's row g, elements
// 2q, 2q + 1 (.trans: rows 2q, 2q + 1 of column g)
void ldmatrix_x4(unsigned* r, const void* row) {
    Slot s{}; s.p = row;
    warp_post(s);
    unsigned l = threadIdx.x & 31u, g = l >> 2, q = l & 3u;
    for (unsigned i = 0; i < 4; i++) std::memcpy(&r[i], (const char*)lane_slot(8 * i + g).p + 4 * q, 4);
}
void ldmatrix_x4_trans(unsigned* r, const void* row) {
    Slot s{}; s.p = row;
    warp_post(s);
    unsigned l = threadIdx.x & 31u, g = l >> 2, q = l & 3u;
    for (unsigned i = 0; i < 4; i++) {
        unsigned short lo, hi;
        std::memcpy(&lo, (const unsigned short*)lane_slot(8 * i + 2 * q).p + g, 2);
        std::memcpy(&hi, (const unsigned short*)lane_slot(8 * i + 2 * q + 1).p + g, 2);
        r[i] = lo | (unsigned)hi << 16;
    }
}
#endif
unsigned __byte_perm(unsigned a, unsigned b, unsigned s) {
    unsigned long long x = ((unsigned long long)b << 32) | a, r = 0;
    for (int i = 0; i < 4; i++) r |= ((x >> (8 * ((s >> (4 * i)) & 7))) & 0xffull) << (8 * i);
    return (unsigned)r;
}
int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }

// Runs kernel(args) over grid (gx, gy, gz) of blocks of `threads` threads; `call` invokes the kernel with the
// packed arguments (a wrapper per kernel, written by cpu_simt.py).
extern "C" void halo_cpu_launch(void (*call)(void**), void** args, unsigned gx, unsigned gy, unsigned gz,
                                unsigned threads) {
    gridDim = {gx, gy, gz};
    blockDim = {threads, 1, 1};
    std::vector<float> slots(threads);
    exchange = slots.data();
    for (unsigned bz = 0; bz < gz; bz++)
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
                    pool.emplace_back([=] { threadIdx = {t, 0, 0}; blockIdx = {bx, by, bz}; call(args); });
                for (auto& th : pool) th.join();
            }
}
