// Per-layer glue of the forward pass: q/k norm + rotary + KV-cache write, paged attention, residual + RMS norm.
// Float32 throughout. Step metadata (positions, slots, token -> sequence, seq_lens, block tables) is read
// from device memory, so a captured graph replays any step of the same token count.

// The paged KV cache [slots, Hkv, D]: position j of a sequence lives in slot kv_slot(table, j, bs) (prelude.h).
// kv_row_at: `within` units into kv head hk's row there, for rows `row` units wide (elements, or bytes of a row and
// its parts), as one 32 x 32-bit wide product onto a 32-bit base (exact: slots and a slot's Hkv rows stay under
// 2^32 units; run 28 found the tensor-core tile's fetch building each source with 64-bit multiplies).
// kv_row: the element offset of the row.
__device__ __forceinline__ size_t kv_row_at(const i32* table, int j, int bs, int Hkv, int hk, u32 row, u32 within) {
    return (size_t)(u32)kv_slot(table, j, bs) * (u32)(Hkv * row) + (u32)(hk * row + within);
}
__device__ __forceinline__ size_t kv_row(const i32* table, int j, int bs, int Hkv, int hk, int D) {
    return kv_row_at(table, j, bs, Hkv, hk, D, 0);
}

// qkv [T, ld] holds q (H heads) | k (Hkv) | v (Hkv), each head D wide. For every token t and head:
// optional per-head RMS norm (q_norm / k_norm), rotary on the first rope_dim dims (neox: pairs (i, i + r/2);
// normal: (2i, 2i + 1)), angles = pos * inv_freq[i] in double, cos and sin times rope_scale (YaRN's magnitude
// factor, engine.model.arch.rope_attention_factor; else 1). q is rotated in place; k (rotated) and v are
// written to the cache slot slot_mapping[t]. Grid: (T, H + Hkv); block: D threads rounded up to 32.
// Builds: halo_rope_kv (float32 cache), halo_rope_kv_f16 (f16 cache: K and V rounded to nearest).
template <typename KV>
__device__ void rope_kv(float* qkv, i32 ld, const i32* positions, const i32* slots, const float* q_norm,
                        const float* k_norm, float eps, i32 H, i32 Hkv, i32 D, i32 rope_dim, i32 neox,
                        const double* inv_freq, double rope_scale, KV* kcache, KV* vcache) {
    __shared__ float buf[1024];
    __shared__ float red[32];
    int t = blockIdx.x, head = blockIdx.y, d = threadIdx.x;
    bool is_q = head < H;
    float* src = qkv + (size_t)t * ld + (size_t)head * D;      // k heads follow the q heads directly
    float v = d < D ? src[d] : 0.0f;
    const float* nw = is_q ? q_norm : k_norm;
    if (nw) {
        float inv = 1.0f / sqrtf(block_sum(v * v, red) / (float)D + eps);
        v = d < D ? v * inv * nw[d] : 0.0f;
    }
    if (d < D) buf[d] = v;
    __syncthreads();
    float out = v;
    int pos = positions[t];
    if (d < rope_dim) {
        int half = rope_dim >> 1, i, partner;
        bool first;
        if (neox) { i = d < half ? d : d - half; first = d < half; partner = first ? d + half : d - half; }
        else { i = d >> 1; first = (d & 1) == 0; partner = first ? d + 1 : d - 1; }
        double ang = (double)pos * inv_freq[i];
        float c = (float)(cos(ang) * rope_scale), s = (float)(sin(ang) * rope_scale);
        float a = first ? v : buf[partner], b = first ? buf[partner] : v;
        out = first ? a * c - b * s : b * c + a * s;
    }
    if (d >= D) return;
    if (is_q) { src[d] = out; return; }
    int hk = head - H;
    size_t slot = (size_t)slots[t];
    src[d] = out;
    kv_store(kcache + (slot * Hkv + hk) * D + d, out);
    kv_store(vcache + (slot * Hkv + hk) * D + d, src[(size_t)Hkv * D + d]);   // v head hk: Hkv heads after k head hk
}

// The entries open with GRID_DEPENDENCY_LATER: launched programmatically, so their launch hides behind the tail
// of the q|k|v matvec before them (nothing worth fetching ahead: the norm weights are a few hundred bytes).
HALO_KERNEL void halo_rope_kv(float* qkv, i32 ld, const i32* positions, const i32* slots, const float* q_norm,
                              const float* k_norm, float eps, i32 H, i32 Hkv, i32 D, i32 rope_dim, i32 neox,
                              const double* inv_freq, double rope_scale, float* kcache, float* vcache) {
    GRID_DEPENDENCY_LATER();
    grid_dependency_wait();
    rope_kv<float>(qkv, ld, positions, slots, q_norm, k_norm, eps, H, Hkv, D, rope_dim, neox, inv_freq, rope_scale,
                   kcache, vcache);
}

HALO_KERNEL void halo_rope_kv_f16(float* qkv, i32 ld, const i32* positions, const i32* slots, const float* q_norm,
                                  const float* k_norm, float eps, i32 H, i32 Hkv, i32 D, i32 rope_dim, i32 neox,
                                  const double* inv_freq, double rope_scale, unsigned short* kcache,
                                  unsigned short* vcache) {
    GRID_DEPENDENCY_LATER();
    grid_dependency_wait();
    rope_kv<unsigned short>(qkv, ld, positions, slots, q_norm, k_norm, eps, H, Hkv, D, rope_dim, neox, inv_freq,
                            rope_scale, kcache, vcache);
}

// out[t, h*D:(h+1)*D] = softmax(scale * q . K^T + mask) V over the sequence's cached keys, read through its
// block table. Keys allowed: j <= pos (causal), and j > pos - window when window > 0 (sliding). sinks (null:
// none) [H]: a per-head logit that joins the softmax's denominator and attends to nothing (gpt-oss).
// Grid: (T, H); block: 32 * NW threads; each warp walks keys j = lo + warp, lo + warp + NW, ... with an
// online softmax; warps merge through shared memory (dynamic: NW * (D + 2) floats).
#define ATT_MAX_PER_LANE 8      // D <= 256
// Builds: halo_attention (float32 cache), halo_attention_f16.
template <typename KV>
__device__ void attention_rows(const float* qkv, i32 ld, const KV* kcache, const KV* vcache,
                               const i32* positions, const i32* token_seq, const i32* block_tables, i32 bt_width,
                               i32 bs, i32 H, i32 Hkv, i32 D, float scale, i32 window, const float* sinks,
                               float* out) {
    extern __shared__ float sm[];
    int t = blockIdx.x, h = blockIdx.y, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int nw = blockDim.x >> 5;
    int hk = h / (H / Hkv);
    int pos = positions[t], s = token_seq[t];
    int lo = window > 0 ? max(0, pos - window + 1) : 0;
    const i32* table = block_tables + (size_t)s * bt_width;
    const float* q = qkv + (size_t)t * ld + (size_t)h * D;
    float qr[ATT_MAX_PER_LANE], acc[ATT_MAX_PER_LANE];
    #pragma unroll
    for (int i = 0; i < ATT_MAX_PER_LANE; i++) {
        int d = lane + 32 * i;
        qr[i] = d < D ? q[d] * scale : 0.0f;
        acc[i] = 0.0f;
    }
    float m = NEG_INF, l = 0.0f;
    for (int j = lo + warp; j <= pos; j += nw) {
        size_t slot = kv_slot(table, j, bs);
        const KV* kr = kcache + (slot * Hkv + hk) * D;
        const KV* vr = vcache + (slot * Hkv + hk) * D;
        float p = 0.0f;
        #pragma unroll
        for (int i = 0; i < ATT_MAX_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) p += qr[i] * kv_value(kr[d]);
        }
        float sc = warp_sum(p);
        float mn = fmaxf(m, sc);
        float corr = __expf(m - mn), e = __expf(sc - mn);
        l = l * corr + e;
        #pragma unroll
        for (int i = 0; i < ATT_MAX_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) acc[i] = acc[i] * corr + e * kv_value(vr[d]);
        }
        m = mn;
    }
    float* wa = sm + (size_t)warp * (D + 2);
    #pragma unroll
    for (int i = 0; i < ATT_MAX_PER_LANE; i++) {
        int d = lane + 32 * i;
        if (d < D) wa[d] = acc[i];
    }
    if (lane == 0) { wa[D] = m; wa[D + 1] = l; }
    __syncthreads();
    float S = sinks ? sinks[h] : NEG_INF;
    float M = S;                                                // the sink joins the maximum
    for (int w = 0; w < nw; w++) M = fmaxf(M, sm[(size_t)w * (D + 2) + D]);
    float L = sinks ? __expf(S - M) : 0.0f;
    for (int w = 0; w < nw; w++) {
        float mw = sm[(size_t)w * (D + 2) + D];
        if (mw != NEG_INF) L += sm[(size_t)w * (D + 2) + D + 1] * __expf(mw - M);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int w = 0; w < nw; w++) {
            float mw = sm[(size_t)w * (D + 2) + D];
            if (mw != NEG_INF) o += sm[(size_t)w * (D + 2) + d] * __expf(mw - M);
        }
        out[(size_t)t * H * D + (size_t)h * D + d] = o / L;
    }
}

#define ATTENTION_ENTRY(NAME, KV)                                                                                    \
HALO_KERNEL void NAME(const float* qkv, i32 ld, const KV* kcache, const KV* vcache, const i32* positions,            \
                      const i32* token_seq, const i32* block_tables, i32 bt_width, i32 bs, i32 H, i32 Hkv, i32 D,    \
                      float scale, i32 window, const float* sinks, float* out) {                                     \
    GRID_DEPENDENCY_SYNC();                                                                                          \
    attention_rows<KV>(qkv, ld, kcache, vcache, positions, token_seq, block_tables, bt_width, bs, H, Hkv, D, scale,  \
                       window, sinks, out);                                                                          \
}
ATTENTION_ENTRY(halo_attention, float)
ATTENTION_ENTRY(halo_attention_f16, unsigned short)

// out[t, h*D:(h+1)*D] from halo_attention_split's nc partials of (t, h), with the sinks as in halo_attention.
// The first warp reads the chunks' m and l (lane c: chunks c, c + 32, ...), reduces the maximum and the
// denominator by shuffles and puts each chunk's weight exp(m_c - M) / L in shared memory (block-wide reductions
// cost four barriers per head, which showed at a short depth once the block had 16 warps). Then
// the chunks are cut into groups (up to SKV_MERGE_GROUPS and blockDim / D, one per 16 live chunks) summed by
// separate threads and added in group order; a thread takes its group's chunks 8 at a time, skipping 8 whose
// weights are all 0 (no allowed key: most chunks at a short depth) and loading the others together. One chunk at
// a time behind a weight test took ~12 us per layer at 64 live chunks on the H200, 8 at a time on one thread per
// dim ~6 us.
// PART is const volatile float* in the fused form (halo_attention_split with counters: other blocks of the same
// launch wrote the partials), const float* else. Block: a multiple of 32 threads, all of them calling;
// nc <= SKV_MERGE_MAX. osum: SKV_MERGE_GROUPS * D floats of shared memory (D <= 256); red: one float.
#define SKV_MERGE_MAX 256
#define SKV_MERGE_GROUPS 4
template <typename PART>
__device__ void skv_merge_head(PART part, int nc, int t, int h, int H, int D, const float* sinks, float* out,
                               float* wc, float* red, float* osum) {
    int W = D + 2;
    PART p = part + (size_t)(t * H + h) * nc * W;
    if (threadIdx.x < 32) {                                // the weights: one warp, no block-wide barriers
        int lane = threadIdx.x;
        float S = sinks ? sinks[h] : NEG_INF;
        float M = NEG_INF;
        for (int c = lane; c < nc; c += 32) M = fmaxf(M, p[(size_t)c * W + D]);
        M = fmaxf(warp_max(M), S);                         // the sink joins the maximum
        float L = 0.0f, live = 0.0f;
        for (int c = lane; c < nc; c += 32) {
            float mc = p[(size_t)c * W + D];
            float e = mc != NEG_INF ? __expf(mc - M) : 0.0f;
            wc[c] = e;
            L += e != 0.0f ? p[(size_t)c * W + D + 1] * e : 0.0f;
            live += mc != NEG_INF ? 1.0f : 0.0f;
        }
        L = warp_sum(L) + (sinks ? __expf(S - M) : 0.0f);
        live = warp_sum(live);
        for (int c = lane; c < nc; c += 32) wc[c] /= L;
        if (lane == 0) red[0] = live;
    }
    __syncthreads();
    // groups of >= 16 live chunks: at a short depth (few live chunks) one thread per dim and no second pass
    int groups = min(min(SKV_MERGE_GROUPS, max(1, (int)blockDim.x / D)), max(1, (int)red[0] / 16));
    int span = ((nc + groups - 1) / groups + 7) & ~7;      // chunks per group, whole batches of 8
    float* dst = out + (size_t)t * H * D + (size_t)h * D;
    for (int idx = threadIdx.x; idx < groups * D; idx += blockDim.x) {
        int g = idx / D, d = idx - g * D, end = min(nc, (g + 1) * span);
        float o = 0.0f;
        for (int k0 = g * span; k0 < end; k0 += 8) {
            float w[8];
            bool any = false;
            #pragma unroll
            for (int j = 0; j < 8; j++) { w[j] = k0 + j < end ? wc[k0 + j] : 0.0f; any |= w[j] != 0.0f; }
            if (!any) continue;
            #pragma unroll
            for (int j = 0; j < 8; j++)
                if (w[j] != 0.0f) o += p[(size_t)(k0 + j) * W + d] * w[j];
        }
        if (groups == 1) dst[d] = o;
        else osum[idx] = o;
    }
    if (groups > 1) {
        __syncthreads();
        for (int d = threadIdx.x; d < D; d += blockDim.x) {
            float o = 0.0f;
            for (int g = 0; g < groups; g++) o += osum[g * D + d];
            dst[d] = o;
        }
    }
    __syncthreads();                                       // wc, red and osum are reused by the next head
}

// Grid: (T, H); block: a multiple of 32 threads (engine.gpu.forward.merge_threads).
HALO_KERNEL void halo_attention_merge(const float* part, i32 nc, i32 H, i32 D, const float* sinks, float* out) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float wc[SKV_MERGE_MAX];
    __shared__ float red[32];
    __shared__ float osum[SKV_MERGE_GROUPS * 256];
    skv_merge_head<const float*>(part, nc, blockIdx.x, blockIdx.y, H, D, sinks, out, wc, red, osum);
}

// Split-KV (flash-decoding) attention for steps of few tokens at any depth: the keys token t may see (lo .. pos)
// are cut into the grid's nc chunks of ck = max(SKV_MIN_KEYS, ceil(keys / nc)) positions (rounded up to 4), so
// every depth uses all nc blocks per head (a fixed split sized for the cache's capacity left a short context on
// one or two blocks, each walking its keys one dependent load at a time); block (t, kv head hk, chunk c) walks its
// chunk once for all G = H / Hkv query heads of that kv head (each K/V row is read once per group, not once per
// head), then merges its walkers and writes, per (t, h, c), the unnormalised partial
// part[((t * H + h) * nc + c) * (D + 2)] = acc[D] | m | l (a chunk with no allowed key writes m = -inf, l = 0).
// With `counters` (T x Hkv int32, zero between steps) the last block of (t, hk) to finish merges the chunks of its
// G heads into out (one launch per layer fewer); with null counters halo_attention_merge does it.
// Walkers: a key row is read by LPK lanes, 16 bytes per lane and vector (EPV = 4 floats or 8 f16 values; lane
// sub-lane sl holds dims EPV (sl + LPK v) .. + EPV - 1, v < NV), so a warp is SW = 32 / LPK walkers of their own
// keys (an f16 row of 128 is 16 lanes' loads: as 32 lanes of 8 bytes it read half of float32's bytes per request
// and ran slower than float32). Warp w, walker s takes keys jb + u SW + s, u < UNROLL, jb = j0 + UNROLL SW w, then
// jb + UNROLL SW SKV_WARPS, ...: their loads are issued together (with PREFETCH one trip ahead: the next trip's
// rows are in flight while this one's are folded into an online softmax per head).
// Builds: halo_attention_split_d{64,128,256}[_f16]_g{2,4,8}: the head size class (LPK, NV as the table below;
// engine.gpu.forward.split_kernel asks for them), GMAX the GQA group rounded up (q and acc take GMAX x EPV NV
// registers: one build for every group held 144 registers on the Qwen3-4B shapes, 3 blocks per SM, two waves).
// Limits (the caller checks): D % 8 == 0, D <= EPV LPK NV, G <= GMAX. Shared: SKV_WARPS * SW * G * (D + 2) floats.
#define SKV_WARPS 4
#define SKV_MAX_GROUP 8
#define SKV_MIN_KEYS 16         // shortest chunk: one trip of every warp

// The N values v of each of a walker's LPK lanes summed over those lanes, spread out: each halving step sends one
// half of the values still held to the partner lane and keeps the other half, so lane sl ends with
// max(1, N / LPK) sums in v[0 ..]: the sums of values n = i + sl N / LPK (N >= LPK), or of n = sl N / LPK (N < LPK;
// the steps left over sum the single value in place, so LPK / N lanes hold each sum). lanes_sum_owner /
// lanes_sum_slot say where value n ended up. Against a shuffle tree per value (N log2 LPK shuffles) it takes
// N - 1 + log2(LPK / N) (for N <= LPK), and two selects per value sent.
template <int LPK, int N>
__device__ __forceinline__ void lanes_sum_spread(float (&v)[N], int sl) {
    static_assert((N & (N - 1)) == 0 && (LPK & (LPK - 1)) == 0, "halving needs powers of two");
    int held = N;
    #pragma unroll
    for (int o = LPK / 2; o > 0; o >>= 1) {
        if (held > 1) {
            int half = held / 2;
            bool upper = sl & o;                               // keeps the upper half, sends the lower
            #pragma unroll
            for (int i = 0; i < N / 2; i++) {
                if (i >= half) break;
                float send = upper ? v[i] : v[i + half], keep = upper ? v[i + half] : v[i];
                v[i] = keep + SHFL_XOR(send, o);
            }
            held = half;
        } else {
            v[0] += SHFL_XOR(v[0], o);
        }
    }
}

// (sub-lane, slot) of a walker holding the sum of value n after lanes_sum_spread<LPK, N>.
template <int LPK, int N>
__device__ __forceinline__ int lanes_sum_owner(int n) { return N >= LPK ? n / (N / LPK) : n * (LPK / N); }
template <int LPK, int N>
__device__ __forceinline__ int lanes_sum_slot(int n) { return N >= LPK ? n % (N / LPK) : 0; }

// The head dim a walker's lane holds as its i-th value: vector i / EPV, element i % EPV (sub-lane sl of LPK).
template <int LPK, int EPV>
__device__ __forceinline__ int walker_dim(int sl, int i) { return EPV * (sl + LPK * (i / EPV)) + i % EPV; }

template <typename KV, int LPK, int NV, int UNROLL, int EPV = 16 / sizeof(KV)>
__device__ __forceinline__ void skv_load(const KV* kcache, const KV* vcache, const i32* table, int bs, int Hkv,
                                         int hk, int D, int jb, int j1, int lane, float (&kk)[UNROLL][EPV * NV],
                                         float (&vv)[UNROLL][EPV * NV]) {
    const int SW = 32 / LPK, sub = lane / LPK, sl = lane % LPK;
    #pragma unroll
    for (int u = 0; u < UNROLL; u++) {
        int j = min(jb + u * SW + sub, j1 - 1);               // past the chunk: a repeat, skipped by the caller
        size_t row = kv_row(table, j, bs, Hkv, hk, D);
        #pragma unroll
        for (int v = 0; v < NV; v++) {
            int d = walker_dim<LPK, EPV>(sl, EPV * v);
            if (d < D) {
                kv_load16(kcache + row + d, &kk[u][EPV * v]);
                kv_load16(vcache + row + d, &vv[u][EPV * v]);
            } else {
                #pragma unroll
                for (int e = 0; e < EPV; e++) { kk[u][EPV * v + e] = 0.0f; vv[u][EPV * v + e] = 0.0f; }
            }
        }
    }
}

// The end of a split-KV block: combine its WALKERS walkers' (acc, m, l) per head, laid out in shared memory as
// sm[(walker G + g) (D + 2) + (d | D: m | D + 1: l)], into chunk c's partial of each head; with counters, the
// block that finishes a (token, kv head) last also merges its chunks (HALO_SKV_FUSED).
__device__ void skv_finish(const float* sm, int WALKERS, int G, int D, int t, int H, int Hkv, int hk, int c, int nc,
                           float* part, i32* counters, const float* sinks, float* out) {
    int W = D + 2;
    __syncthreads();
    for (int k = threadIdx.x; k < G * W; k += blockDim.x) {     // k = g * W + (d | D: m | D + 1: l)
        int g = k / W, d = k - g * W;
        float M = NEG_INF;
        for (int w = 0; w < WALKERS; w++) M = fmaxf(M, sm[(size_t)(w * G + g) * W + D]);
        float v = 0.0f;
        if (d == D) v = M;
        else if (M != NEG_INF) {
            for (int w = 0; w < WALKERS; w++) {
                const float* wa = sm + (size_t)(w * G + g) * W;
                if (wa[D] != NEG_INF) v += wa[d] * __expf(wa[D] - M);
            }
        }
        int h = hk * G + g;
        part[((size_t)(t * H + h) * nc + c) * W + d] = v;
    }
    if (!counters) return;                      // halo_attention_merge follows
    __shared__ float wc[SKV_MERGE_MAX];
    __shared__ float red[32];
    __shared__ float osum[SKV_MERGE_GROUPS * 256];
    __shared__ int last;
    __threadfence();                            // this block's partials are visible before it is counted
    __syncthreads();
    if (threadIdx.x == 0) {
        i32* cnt = counters + t * Hkv + hk;
        last = atomicAdd(cnt, 1) == nc - 1;
        if (last) *cnt = 0;                     // every chunk has counted: ready for the next step
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int g = 0; g < G; g++)
        skv_merge_head<const volatile float*>(part, nc, t, hk * G + g, H, D, sinks, out, wc, red, osum);
}


template <typename KV, int LPK, int NV, int UNROLL, int GMAX, bool PREFETCH>
__device__ void attention_split(const float* qkv, i32 ld, const KV* kcache, const KV* vcache,
                                const i32* positions, const i32* token_seq, const i32* block_tables,
                                i32 bt_width, i32 bs, i32 H, i32 Hkv, i32 D, float scale, i32 window,
                                float* part, i32* counters, const float* sinks, float* out) {
    constexpr int EPV = 16 / sizeof(KV), PER = EPV * NV, SW = 32 / LPK, WALKERS = SKV_WARPS * SW;
    extern __shared__ float sm[];
    int t = blockIdx.x, hk = blockIdx.y, c = blockIdx.z, nc = gridDim.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, sub = lane / LPK, sl = lane % LPK;
    int G = H / Hkv;
    int pos = positions[t], s = token_seq[t];
    int lo = window > 0 ? max(0, pos - window + 1) : 0;
    int ck = max(SKV_MIN_KEYS, (pos + 1 - lo + nc - 1) / nc);
    ck = (ck + 3) & ~3;
    int j0 = lo + c * ck, j1 = min(pos + 1, j0 + ck);
    const i32* table = block_tables + (size_t)s * bt_width;
    float qr[GMAX][PER], acc[GMAX][PER], m[GMAX], l[GMAX];
    #pragma unroll
    for (int g = 0; g < GMAX; g++) {
        const float* q = qkv + (size_t)t * ld + (size_t)(hk * G + g) * D;
        m[g] = NEG_INF;
        l[g] = 0.0f;
        #pragma unroll
        for (int i = 0; i < PER; i++) {
            int d = walker_dim<LPK, EPV>(sl, i);
            qr[g][i] = (g < G && d < D) ? q[d] * scale : 0.0f;
            acc[g][i] = 0.0f;
        }
    }
    const int step = UNROLL * SW * SKV_WARPS;
    float kk[UNROLL][PER], vv[UNROLL][PER];
    int jb = j0 + UNROLL * SW * warp;
    if (jb < j1) skv_load<KV, LPK, NV, UNROLL>(kcache, vcache, table, bs, Hkv, hk, D, jb, j1, lane, kk, vv);
    for (; jb < j1; jb += step) {
        float nk[UNROLL][PER], nv[UNROLL][PER];
        bool more = jb + step < j1;
        if (PREFETCH && more) skv_load<KV, LPK, NV, UNROLL>(kcache, vcache, table, bs, Hkv, hk, D, jb + step, j1,
                                                            lane, nk, nv);
        // The trip's UNROLL keys per head at once: their scores are independent (the shuffles of all of them in
        // flight together), then one rescale of acc by the new maximum. Folding key by key chained every key's
        // shuffles, max and exp behind the previous key's: walkers were bound by that latency, not by memory.
        // Every head's and key's dot over this lane's dims (value g UNROLL + u; heads past G have q = 0), summed
        // over the walker's lanes spread out, each sum then read from its lane when its head is folded in: a sum
        // per (head, key) by its own shuffle tree took 5 shuffles each, the most issued instruction at depth.
        constexpr int N = GMAX * UNROLL;
        float dots[N];
        #pragma unroll
        for (int g = 0; g < GMAX; g++)
            #pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                float p = 0.0f;
                #pragma unroll
                for (int i = 0; i < PER; i++) p += qr[g][i] * kk[u][i];
                dots[g * UNROLL + u] = p;
            }
        lanes_sum_spread<LPK, N>(dots, sl);                   // every lane calls: the shuffles need all 32
        const int walker_lane0 = lane - sl;
        #pragma unroll
        for (int g = 0; g < GMAX; g++) {
            if (g >= G) break;
            float sc[UNROLL];
            #pragma unroll
            for (int u = 0; u < UNROLL; u++) {
                int owner = walker_lane0 + lanes_sum_owner<LPK, N>(g * UNROLL + u);
                int slot = lanes_sum_slot<LPK, N>(g * UNROLL + u);          // unrolled: a constant, dots a register
                float s = SHFL_FROM(dots[slot], owner);
                sc[u] = jb + u * SW + sub < j1 ? s : NEG_INF;   // this walker's keys past the chunk: weight 0
            }
            float mx = m[g];
            #pragma unroll
            for (int u = 0; u < UNROLL; u++) mx = fmaxf(mx, sc[u]);
            if (mx == NEG_INF) continue;                      // no key for this walker yet (the next head's
                                                              // shuffles are reached by every lane all the same)
            float corr = __expf(m[g] - mx);                   // 0 on the walker's first keys (m = -inf)
            l[g] *= corr;
            #pragma unroll
            for (int i = 0; i < PER; i++) acc[g][i] *= corr;
            #pragma unroll
            for (int u = 0; u < UNROLL; u++) {                // selected, not branched: keys past the chunk add 0
                float e = __expf(sc[u] - mx);
                l[g] += e;
                #pragma unroll
                for (int i = 0; i < PER; i++) acc[g][i] += e * vv[u][i];
            }
            m[g] = mx;
        }
        if (!more) break;
        if (PREFETCH) {
            #pragma unroll
            for (int u = 0; u < UNROLL; u++)
                #pragma unroll
                for (int i = 0; i < PER; i++) { kk[u][i] = nk[u][i]; vv[u][i] = nv[u][i]; }
        } else {
            skv_load<KV, LPK, NV, UNROLL>(kcache, vcache, table, bs, Hkv, hk, D, jb + step, j1, lane, kk, vv);
        }
    }
    int W = D + 2, walker = warp * SW + sub;
    #pragma unroll
    for (int g = 0; g < GMAX; g++) {
        if (g >= G) break;
        float* wa = sm + (size_t)(walker * G + g) * W;
        #pragma unroll
        for (int i = 0; i < PER; i++) {
            int d = walker_dim<LPK, EPV>(sl, i);
            if (d < D) wa[d] = acc[g][i];
        }
        if (sl == 0) { wa[D] = m[g]; wa[D + 1] = l[g]; }
    }
    skv_finish(sm, WALKERS, G, D, t, H, Hkv, hk, c, nc, part, counters, sinks, out);
}

#define SKV_ENTRY(NAME, KV, LPK, NV, UNROLL, GMAX, PREFETCH)                                                        \
HALO_KERNEL void NAME(const float* qkv, i32 ld, const KV* kcache, const KV* vcache, const i32* positions,            \
                      const i32* token_seq, const i32* block_tables, i32 bt_width, i32 bs, i32 H, i32 Hkv, i32 D,    \
                      float scale, i32 window, float* part, i32* counters, const float* sinks, float* out) {        \
    GRID_DEPENDENCY_SYNC();                                                                                         \
    attention_split<KV, LPK, NV, UNROLL, GMAX, PREFETCH>(qkv, ld, kcache, vcache, positions, token_seq,              \
                                                         block_tables, bt_width, bs, H, Hkv, D, scale, window, part, \
                                                         counters, sinks, out);                                     \
}
#define SKV_GROUPS(NAME, KV, LPK, NV, UNROLL, PREFETCH)                                                              \
SKV_ENTRY(NAME##_g2, KV, LPK, NV, UNROLL, 2, PREFETCH)                                                              \
SKV_ENTRY(NAME##_g4, KV, LPK, NV, UNROLL, 4, PREFETCH)                                                              \
SKV_ENTRY(NAME##_g8, KV, LPK, NV, UNROLL, 8, PREFETCH)
// UNROLL and PREFETCH per build: the fastest of 2-3 variants each at depths 4k and 16k (tests/gpu/bench_attention.py,
// H200): prefetching costs registers, which the f16 builds (8 values per lane and vector) cannot spare. d128 float32
// (the Qwen3-4B shapes) at UNROLL 2 once the sums were spread over lanes: 95 registers, 5 blocks an SM, where UNROLL 4
// held 128 (4 blocks): 16k 2,038 -> 1,694 us a step, 4k 884 -> 736 (run 22; UNROLL 8 was slower still).
//         name                           element         LPK NV UNROLL PREFETCH
SKV_GROUPS(halo_attention_split_d64,      float,          16, 1, 4,     true)
SKV_GROUPS(halo_attention_split_d128,     float,          32, 1, 2,     true)
SKV_GROUPS(halo_attention_split_d256,     float,          32, 2, 4,     false)
SKV_GROUPS(halo_attention_split_d64_f16,  unsigned short, 8,  1, 4,     false)
SKV_GROUPS(halo_attention_split_d128_f16, unsigned short, 16, 1, 1,     true)
SKV_GROUPS(halo_attention_split_d256_f16, unsigned short, 32, 1, 4,     false)

// Split-KV attention on tensor cores, for an f16 cache (CUDA sm_80+): halo_attention_split_mma_d{64,128}_f16, the
// same grid, chunks, partials and fused merge as the builds above. Those spend per key and head a dot product over
// lanes, a shuffle reduction, exps and the acc update: at depth 16k on the H200 they issued one instruction per
// ~6 cycles at 53% of DRAM bandwidth (run 11's ncu), so the cache's bytes were not the bound. Here a warp takes 16
// keys at a time as two products on mma.m16n8k16 (prelude.h's fragment layouts):
//   S (16 x 16) = Q (rows: the G <= 8 heads of kv head hk, the rest zero) x K^T (16 dims x 16 keys per MMA),
//   O (16 x D) += P (16 heads x 16 keys) x V (16 keys x 8 dims per MMA),
// so one MMA does 128 of the old kernel's multiply-adds for a head and the reductions over dims are in the MMA.
// Float32-level products: the cache's f16 values are exact operands; Q (scaled) and P are f16 head + tail
// (f16_split2: 2 MMAs per product); each tile's P V goes to a fresh fragment added to the float32 O registers
// (the MMA's own accumulation is not IEEE; a tile's chain is 2 MMAs). The online softmax is float32 per tile.
// Operand orders: the sum over dims may take any order if Q and K agree, so lane (g, q)'s K run is the D / 4
// contiguous dims from (D / 4) q (16-byte loads), k slots 2q, 2q+1 | 2q+8, 2q+9 of chunk kc being dims
// (D / 4) q + 4 kc + 0, 1 | 2, 3. P's A fragment is S's C fragment (keys 2q, 2q+1 | 8 + 2q, 9 + 2q), so V's B
// fragment pairs keys 2q, 2q+1 at one dim: the lane loads those keys' rows at dims 64 p + 8 g .. + 7 and pairs
// them with byte permutes; output tile n = 8 p + e, column g is dim 64 p + 8 g + e.
// Limits (the caller checks): D == SKV_MMA_D, G <= 8. Compiles to nothing without HALO_TC.
// One 16-key tile's rows for lane (g, q) of attention_split_mma: K rows jt + g and jt + 8 + g (B columns g of the two
// n tiles), the lane's D / 4 dims from (D / 4) q; V rows jt + 2q + (0, 1, 8, 9) at dims 64 i + 8 g .. + 7. Keys past
// the chunk read its last key (masked by the caller).
template <int D>
__device__ __forceinline__ void skv_mma_load(const unsigned short* kcache, const unsigned short* vcache,
                                             const i32* table, int bs, int Hkv, int hk, int jt, int j1, int g, int q,
                                             uint4 (&kr)[2][D / 32], uint4 (&vr)[4][D / 64]) {
    #pragma unroll
    for (int h = 0; h < 2; h++) {
        int j = min(jt + 8 * h + g, j1 - 1);
        const uint4* p = (const uint4*)(kcache + kv_row(table, j, bs, Hkv, hk, D) + (D / 4) * q);
        #pragma unroll
        for (int i = 0; i < D / 32; i++) kr[h][i] = p[i];
    }
    #pragma unroll
    for (int r = 0; r < 4; r++) {
        int j = min(jt + 2 * q + (r & 1) + 8 * (r >> 1), j1 - 1);
        const uint4* p = (const uint4*)(vcache + kv_row(table, j, bs, Hkv, hk, D) + 8 * g);
        #pragma unroll
        for (int i = 0; i < D / 64; i++) vr[r][i] = p[8 * i];
    }
}

template <int D, bool PREFETCH>
__device__ void attention_split_mma(const float* qkv, i32 ld, const unsigned short* kcache,
                                    const unsigned short* vcache, const i32* positions, const i32* token_seq,
                                    const i32* block_tables, i32 bt_width, i32 bs, i32 H, i32 Hkv, float scale,
                                    i32 window, float* part, i32* counters, const float* sinks, float* out) {
#if HALO_TC
    constexpr int KC = D / 16, NT = D / 8, KR = D / 32, VP = D / 64;   // k chunks, n tiles, K / V uint4 per row
    extern __shared__ float sm[];
    int t = blockIdx.x, hk = blockIdx.y, c = blockIdx.z, nc = gridDim.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    int G = H / Hkv;
    int pos = positions[t], s = token_seq[t];
    int lo = window > 0 ? max(0, pos - window + 1) : 0;
    int ck = (max(SKV_MIN_KEYS, (pos + 1 - lo + nc - 1) / nc) + 15) & ~15;   // whole 16-key tiles
    int j0 = lo + c * ck, j1 = min(pos + 1, j0 + ck);
    const i32* table = block_tables + (size_t)s * bt_width;
    u32 qh[KC][2], ql[KC][2];                   // A fragments of Q's row g (rows g + 8 are zero)
    {
        const float* qp = qkv + (size_t)t * ld + (size_t)(hk * G + min(g, G - 1)) * D + (D / 4) * q;
        float live = g < G ? scale : 0.0f;
        #pragma unroll
        for (int kc = 0; kc < KC; kc++) {
            float4 x = *(const float4*)(qp + 4 * kc);
            f16_split2(x.x * live, x.y * live, &qh[kc][0], &ql[kc][0]);
            f16_split2(x.z * live, x.w * live, &qh[kc][1], &ql[kc][1]);
        }
    }
    float o[NT][2], m = NEG_INF, l = 0.0f;       // head g's running output at dims (n, 2q | 2q + 1), max, sum
    #pragma unroll
    for (int n = 0; n < NT; n++) o[n][0] = o[n][1] = 0.0f;
    // The next tile's rows are loaded while this one is computed (both in registers: 2 blocks per SM either way).
    uint4 kr[2][KR], vr[4][VP];
    int jt = j0 + 16 * warp;
    const int step = 16 * SKV_WARPS;
    if (jt < j1) skv_mma_load<D>(kcache, vcache, table, bs, Hkv, hk, jt, j1, g, q, kr, vr);
    for (; jt < j1; jt += step) {
        uint4 nk[2][KR], nv[4][VP];
        bool more = jt + step < j1;
        if (PREFETCH && more) skv_mma_load<D>(kcache, vcache, table, bs, Hkv, hk, jt + step, j1, g, q, nk, nv);
        float sh[2][4], sl[2][4];                // Q's heads and tails in separate chains: 4 independent
        #pragma unroll
        for (int h = 0; h < 2; h++)
            #pragma unroll
            for (int i = 0; i < 4; i++) sh[h][i] = sl[h][i] = 0.0f;
        #pragma unroll
        for (int kc = 0; kc < KC; kc++)
            #pragma unroll
            for (int h = 0; h < 2; h++) {
                const u32* kw = (const u32*)kr[h];
                mma_f16(sl[h], ql[kc][0], 0u, ql[kc][1], 0u, kw[2 * kc], kw[2 * kc + 1]);
                mma_f16(sh[h], qh[kc][0], 0u, qh[kc][1], 0u, kw[2 * kc], kw[2 * kc + 1]);
            }
        float sv[4] = {sh[0][0] + sl[0][0], sh[0][1] + sl[0][1],   // keys jt + 2q, 2q + 1, 8 + 2q, 9 + 2q
                       sh[1][0] + sl[1][0], sh[1][1] + sl[1][1]};
        float mx = NEG_INF;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            if (jt + 2 * q + (i & 1) + 8 * (i >> 1) >= j1) sv[i] = NEG_INF;
            mx = fmaxf(mx, sv[i]);
        }
        mx = fmaxf(mx, SHFL_XOR(mx, 1));
        mx = fmaxf(mx, SHFL_XOR(mx, 2));         // the tile's maximum for head g (key jt < j1: finite)
        float mn = fmaxf(m, mx), corr = __expf(m - mn);
        m = mn;
        float pv[4];
        #pragma unroll
        for (int i = 0; i < 4; i++) pv[i] = __expf(sv[i] - mn);
        l = l * corr + ((pv[0] + pv[1]) + (pv[2] + pv[3]));
        u32 ph0, pl0, ph1, pl1;
        f16_split2(pv[0], pv[1], &ph0, &pl0);
        f16_split2(pv[2], pv[3], &ph1, &pl1);
        #pragma unroll
        for (int n = 0; n < NT; n++) {
            const u32* v0 = (const u32*)&vr[0][n / 8];
            const u32* v1 = (const u32*)&vr[1][n / 8];
            const u32* v2 = (const u32*)&vr[2][n / 8];
            const u32* v3 = (const u32*)&vr[3][n / 8];
            int e = n % 8, sel = (e & 1) ? 0x7632 : 0x5410;       // dim e of 8: the high or low halves
            u32 b0 = __byte_perm(v0[e / 2], v1[e / 2], sel), b1 = __byte_perm(v2[e / 2], v3[e / 2], sel);
            float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_f16(d, pl0, 0u, pl1, 0u, b0, b1);
            mma_f16(d, ph0, 0u, ph1, 0u, b0, b1);
            o[n][0] = o[n][0] * corr + d[0];
            o[n][1] = o[n][1] * corr + d[1];
        }
        if (!more) break;
        if (!PREFETCH) {
            skv_mma_load<D>(kcache, vcache, table, bs, Hkv, hk, jt + step, j1, g, q, kr, vr);
            continue;
        }
        #pragma unroll
        for (int h = 0; h < 2; h++)
            #pragma unroll
            for (int i = 0; i < KR; i++) kr[h][i] = nk[h][i];
        #pragma unroll
        for (int r = 0; r < 4; r++)
            #pragma unroll
            for (int i = 0; i < VP; i++) vr[r][i] = nv[r][i];
    }
    l += SHFL_XOR(l, 1);
    l += SHFL_XOR(l, 2);
    if (g < G) {
        float* wa = sm + (size_t)(warp * G + g) * (D + 2);
        #pragma unroll
        for (int n = 0; n < NT; n++) {
            int d0 = 64 * (n / 8) + 16 * q + n % 8;             // columns 2q, 2q + 1: dims d0, d0 + 8
            wa[d0] = o[n][0];
            wa[d0 + 8] = o[n][1];
        }
        if (q == 0) { wa[D] = m; wa[D + 1] = l; }
    }
    skv_finish(sm, SKV_WARPS, G, D, t, H, Hkv, hk, c, nc, part, counters, sinks, out);
#endif
}

#define SKV_MMA_ENTRY(NAME, D, PF)                                                                                      \
HALO_KERNEL void NAME(const float* qkv, i32 ld, const unsigned short* kcache,                                     \
        const unsigned short* vcache, const i32* positions, const i32* token_seq, const i32* block_tables,          \
        i32 bt_width, i32 bs, i32 H, i32 Hkv, i32 Dh, float scale, i32 window, float* part, i32* counters,          \
        const float* sinks, float* out) {                                                                           \
    GRID_DEPENDENCY_SYNC();                                                                                         \
    attention_split_mma<D, PF>(qkv, ld, kcache, vcache, positions, token_seq, block_tables, bt_width, bs, H, Hkv,        \
                           scale, window, part, counters, sinks, out);                                             \
}
SKV_MMA_ENTRY(halo_attention_split_mma_d64_f16, 64, true)
SKV_MMA_ENTRY(halo_attention_split_mma_d128_f16, 128, true)

// Tiled prefill attention (flash-attention style) on tensor cores, for steps of many tokens: a block takes
// R query rows = up to R / G consecutive tokens of the step x the G = H / Hkv query heads of kv head
// blockIdx.y (row r: token tok0 + r / G, head hk G + r % G), so each K/V tile is read once for the whole GQA
// group and its R rows. Per tile of FA_KEYS keys (read through the sequence's block table into shared memory):
// S = Q K^T and O += P V on tensor cores, online softmax in float32 with S and (float32 caches) every tile's P V
// promoted into float32 registers (the MMA's own accumulation is not IEEE; see tc_mma in halo_quant.cu; the f16
// cache's P V accumulates in O's fragments, where that is far below the cache's own rounding). One template for both
// caches on mma.m16n8k16 with f16 operands (attention_mma, below). Warp w owns rows 16 w .. 16 w + 15; Q stays in
// registers (pre-scaled).
// Keys allowed for a row: those of its own sequence with lo <= j <= pos (causal; lo = pos - window + 1 when
// window > 0). A block whose tokens belong to several sequences (a mixed batch step) walks each sequence's keys
// in turn, masking the other sequences' rows. Same contract and output as halo_attention, sinks included.
// R is the block's: 2 R threads, R / 16 warps of 16 rows, R = 64 or FA_MAX_ROWS (the host's choice per step,
// engine.gpu.forward.fa_block_rows: both hold 8 warps an SM, and the wider block stages and splits each K / V tile
// once for twice the rows). Limits (the caller checks): D % 8 == 0, D <= FA_MAX_D, G <= R. Grid:
// (ceil(T / (R / G)), Hkv). Compiles to nothing without HALO_TC (see prelude.h).
#define FA_MAX_ROWS 128
#define FA_KEYS 32
#define FA_MAX_D 128
#define FA_KLD (FA_MAX_D + 4)      // words per staged float32 row (attention_mma's float32 cache)
#define FA_LOG2E 1.44269504088896341f   // the tensor-core tile's scores are in log2 units: scale x log2 e
#define FA_SCALE_KEYS 16           // halo_kv_split's factors: one pair per FA_SCALE_KEYS slots (the cache's blocks
                                   // hold >= 16; a tile's first slot / 16 names it alone)
#define FA_SPLIT_SHARED_BYTES 70144   // halo_attention_tc_split's dynamic shared memory (>= sizeof(FaSmem<FA_SPLIT>))
// Whether a row of sequence rseq at position rpos, first allowed key rlo, may see key j of sequence s (every tiled
// build's mask: causal, windowed, and its own sequence only; a row past the step's tokens has rseq -1)
__device__ __forceinline__ bool fa_key_allowed(int rseq, int rlo, int rpos, int s, int j) {
    return rseq == s && j >= rlo && j <= rpos;
}

// The keys [*jlo, *jhi] that the block's rows of token i's sequence may see, or false when an earlier token of
// the block has the same sequence (its keys were walked then)
__device__ __forceinline__ bool fa_sequence_keys(int i, int ntok, const i32* s_seq, const i32* s_lo,
                                                 const i32* s_pos, int* jlo, int* jhi) {
    int s = s_seq[i];
    for (int j = 0; j < i; j++)
        if (s_seq[j] == s) return false;
    *jlo = 0x7fffffff;
    *jhi = -1;
    for (int j = i; j < ntok; j++)
        if (s_seq[j] == s) { *jlo = min(*jlo, s_lo[j]); *jhi = max(*jhi, s_pos[j]); }
    return true;
}

#if HALO_TC
// The rows of a tiled-attention block (both builds): the tokens' positions, first allowed keys and sequences in
// shared memory, and this lane's two fragment rows g, g + 8 of its warp's 16 (token index in the block, position,
// first key, sequence, q row; a row past the step's tokens has position -1 and no q row).
struct FaRows {
    int rt[2], rpos[2], rlo[2], rseq[2];
    const float* qrow[2];
};

__device__ __forceinline__ FaRows fa_rows(const float* qkv, i32 ld, const i32* positions, const i32* token_seq,
                                          i32 window, int G, int hk, int D, int tok0, int ntok, i32* s_pos, i32* s_lo,
                                          i32* s_seq) {
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2;
    if (threadIdx.x < ntok) {
        int tok = tok0 + threadIdx.x, pos = positions[tok];
        s_pos[threadIdx.x] = pos;
        s_lo[threadIdx.x] = window > 0 ? max(0, pos - window + 1) : 0;
        s_seq[threadIdx.x] = token_seq[tok];
    }
    __syncthreads();
    FaRows R;
    #pragma unroll
    for (int i = 0; i < 2; i++) {
        int r = 16 * warp + g + 8 * i;
        R.rt[i] = r / G;
        bool valid = R.rt[i] < ntok;
        R.rpos[i] = valid ? s_pos[R.rt[i]] : -1;
        R.rlo[i] = valid ? s_lo[R.rt[i]] : 0;
        R.rseq[i] = valid ? s_seq[R.rt[i]] : -1;
        R.qrow[i] = valid ? qkv + (size_t)(tok0 + R.rt[i]) * ld + (size_t)(hk * G + r % G) * D : 0;
    }
    return R;
}

// Whether any row of this warp may see a key of sequence s in [j0, j0 + FA_KEYS) (else the warp skips the tile)
__device__ __forceinline__ bool fa_warp_sees_tile(const FaRows& R, int s, int j0) {
    bool need = false;
    #pragma unroll
    for (int r = 0; r < 2; r++) need |= R.rseq[r] == s && R.rpos[r] >= j0 && R.rlo[r] < j0 + FA_KEYS;
    return __any_sync(0xffffffffu, need);
}

// Whether every row of this warp may see every key of sequence s in [j0, j0 + FA_KEYS) (the tile needs no mask:
// all tiles but those on a diagonal, a window's edge or a sequence's end)
__device__ __forceinline__ bool fa_warp_inside_tile(const FaRows& R, int s, int j0) {
    bool inside = true;
    #pragma unroll
    for (int r = 0; r < 2; r++) inside &= R.rseq[r] == s && R.rlo[r] <= j0 && R.rpos[r] >= j0 + FA_KEYS - 1;
    return __all_sync(0xffffffffu, inside);
}

// One tile's step of the online softmax for this lane's two rows (both tiled builds; scores in log2 units): the
// tile's maxima mx (this lane's part) over the row's 4 lanes, the new running maxima m, the base each exponent
// subtracts (0 while a row has seen no allowed key, so every term stays 0) and corr, which rescales l here and the
// row's O in the caller.
__device__ __forceinline__ void fa_rescale(float* mx, float* m, float* l, float* base, float* corr) {
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], SHFL_XOR(mx[r], 1));
        mx[r] = fmaxf(mx[r], SHFL_XOR(mx[r], 2));
        float mn = fmaxf(m[r], mx[r]);
        base[r] = mn == NEG_INF ? 0.0f : mn;
        corr[r] = exp2_ftz(m[r] - base[r]);
        m[r] = mn;
        l[r] *= corr[r];
    }
}

// out rows from the float32 O fragments of[n][0..3] (C layout: dims 8 n + 2q, + 1 of rows g, g + 8) times
// `oscale` (a power of two: the units O was kept in), the running maxima m (log2 units) and this lane's parts of
// the row sums l; a head's sink joins the maximum and the denominator.
__device__ __forceinline__ void fa_write_rows(const FaRows& R, float (&of)[FA_MAX_D / 8][4], const float* m,
                                              float* l, int G, int hk, int H, int D, int tok0, const float* sinks,
                                              float* out, float oscale) {
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, q = threadIdx.x & 3;
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += SHFL_XOR(l[r], 1);
        l[r] += SHFL_XOR(l[r], 2);
    }
    #pragma unroll
    for (int r = 0; r < 2; r++) {
        if (!R.qrow[r]) continue;
        int r16 = 16 * warp + g + 8 * r, h = hk * G + r16 % G;
        float* o = out + (size_t)(tok0 + R.rt[r]) * H * D + (size_t)h * D + 2 * q;
        float inv = 1.0f / l[r];
        if (sinks) {                     // the sink joins the maximum and the denominator (as halo_attention)
            float S = sinks[h] * FA_LOG2E, Mt = fmaxf(m[r], S), sc = exp2_ftz(m[r] - Mt);
            inv = sc / (l[r] * sc + exp2_ftz(S - Mt));
        }
        inv *= oscale;
        #pragma unroll
        for (int n = 0; n < FA_MAX_D / 8; n++) {
            if (8 * n >= D) break;
            *(float2*)(o + 8 * n) = make_float2(of[n][2 * r] * inv, of[n][2 * r + 1] * inv);
        }
    }
}

// Both caches' build: one template, attention_mma, on mma.m16n8k16 with f16 operands and float32 accumulators.
// Q (times the softmax scale and log2 e: scores and their maxima are in log2 units; for the float32 cache also, per
// row, the power of two that puts the row's largest |q| in [2^14, 2^15)) and P are f16 head + tail (f16_split2, ~22
// bits), so S and P V keep float32-level accuracy:
// - f16 cache: the cache's values are exact f16 operands; a product is 2 MMAs (Q or P head and tail). K and V
//   tiles go global -> shared by cp.async, the next tile while this one is computed (double buffer);
// - float32 cache: each tile's K and V are staged as float32, scaled by a power of two per tile (fa_pow2_for)
//   and split in place into f16 heads and tails, once for the block (fa_split_rows); a product is 3 MMAs (head x
//   head, and each tail against the other's head; the tail x tail term is ~2^-22 of the product). Run 18's TF32
//   build split every K and V element in every warp (~7 instructions an element) and spent 3 MMAs per 8 k.
// B fragments come by ldmatrix (K as is, V transposed), and P's A fragments are S's C fragments (no trip through
// shared memory).
#define FH_LD (FA_MAX_D + 8)       // f16 per shared row: 272 bytes, so an ldmatrix's 8 row addresses hit distinct banks
// The tiles per cache type. f16: K and V as the cache holds them, double-buffered. float32: one tile of K and V
// rows of FA_KLD words (528 bytes: conflict-free ldmatrix rows once split), each row's halves [0, Dp) then its f16
// heads and [Dp, 2 Dp) its tails (Dp: D rounded up to 16); peak: each warp's largest |K| and |V| of the tile.
struct FaTiles16 {
    __align__(16) unsigned short Ks[2][FA_KEYS * FH_LD];
    __align__(16) unsigned short Vs[2][FA_KEYS * FH_LD];
};
struct FaTiles32 {
    __align__(16) float Ks[FA_KEYS * FA_KLD];
    __align__(16) float Vs[FA_KEYS * FA_KLD];
    float peak[2][FA_MAX_ROWS / 16];
};
// The float32 cache split once for the step (halo_kv_split): rows of f16 heads and tails as FaTiles32's after its
// split, double-buffered like FaTiles16, and each tile's (1 / K's factor, 1 / V's, V's factor) in sc. 67.6 KB:
// more than a block's static 48 KB, so its entry takes dynamic shared memory (FA_SPLIT_SHARED_BYTES, which the host
// passes).
struct FaTilesSplit {
    __align__(16) unsigned short Ks[2][FA_KEYS * 2 * FA_KLD];
    __align__(16) unsigned short Vs[2][FA_KEYS * 2 * FA_KLD];
    float4 sc[2];
};
// attention_mma's modes: an f16 cache; a float32 cache split in the block, tile by tile; a float32 cache split for
// the step by halo_kv_split
enum { FA_F16 = 0, FA_F32 = 1, FA_SPLIT = 2 };
template <int MODE> struct FaTilesOf { typedef FaTiles16 T; };
template <> struct FaTilesOf<FA_F32> { typedef FaTiles32 T; };
template <> struct FaTilesOf<FA_SPLIT> { typedef FaTilesSplit T; };
// Declared once in the entry (a __shared__ array inside the template below would exist once per instance; the entry
// dispatches to one instance per head size)
template <int MODE> struct FaSmem {
    typename FaTilesOf<MODE>::T t;
    i32 s_pos[FA_MAX_ROWS], s_lo[FA_MAX_ROWS], s_seq[FA_MAX_ROWS];
};

// 2^s for s = -f16_split_exponent(peak), which puts peak (>= 0) in [2^14, 2^15), and 2^-s in *inv: x 2^s then has
// an f16 head of 11 bits and a tail that stays normal down to 2^-18 of the peak (below, within 2^-39 of it). s is
// clamped to [-126, 126], where both factors are normal floats (an infinite peak stays infinite).
__device__ __forceinline__ float fa_pow2_for(float peak, float* inv) {
    int s = min(max(-f16_split_exponent(peak), -126), 126);
    *inv = __int_as_float((127 - s) << 23);
    return __int_as_float((127 + s) << 23);
}

// float32 cache: keys j0 .. j0 + FA_KEYS - 1 of kv head hk (zeros past jhi) into the staging rows, and each warp's
// largest |K| and |V| into t.peak (read after the caller's barrier)
__device__ __forceinline__ void fa_stage32(FaTiles32& t, const float* kcache, const float* vcache, const i32* table,
                                           int j0, int jhi, int bs, int Hkv, int hk, int D) {
    int D4 = D >> 2;
    float pk = 0.0f, pv = 0.0f;
    for (int idx = threadIdx.x; idx < FA_KEYS * D4; idx += blockDim.x) {
        int kr = idx / D4, c = idx - kr * D4, j = j0 + kr;
        float4 kv = make_float4(0.f, 0.f, 0.f, 0.f), vv = kv;
        if (j <= jhi) {
            size_t off = kv_row(table, j, bs, Hkv, hk, D) + 4 * c;
            kv = *(const float4*)(kcache + off);
            vv = *(const float4*)(vcache + off);
        }
        *(float4*)(t.Ks + kr * FA_KLD + 4 * c) = kv;
        *(float4*)(t.Vs + kr * FA_KLD + 4 * c) = vv;
        pk = fmaxf(pk, max_abs4(kv));
        pv = fmaxf(pv, max_abs4(vv));
    }
    pk = warp_max(pk);
    pv = warp_max(pv);
    if ((threadIdx.x & 31) == 0) {
        t.peak[0][threadIdx.x >> 5] = pk;
        t.peak[1][threadIdx.x >> 5] = pv;
    }
}

// float32 cache: the next tile's K and V rows toward L2 while this one is computed (its staging loads wait behind a
// barrier, with nothing else in flight to hide their latency)
__device__ __forceinline__ void fa_prefetch32(const float* kcache, const float* vcache, const i32* table, int j0,
                                              int jhi, int bs, int Hkv, int hk, int D) {
    int lines = (D + 31) >> 5;                   // 128-byte lines a row
    for (int idx = threadIdx.x; idx < FA_KEYS * lines; idx += blockDim.x) {
        int kr = idx / lines, j = j0 + kr;
        if (j > jhi) break;
        size_t off = kv_row(table, j, bs, Hkv, hk, D) + 32 * (idx - kr * lines);
        prefetch_l2(kcache + off);
        prefetch_l2(vcache + off);
    }
}

// float32 cache: this warp's staged rows (warp, warp + warps, ...) times f (a power of two) split in place into f16
// heads (halves [0, Dp) of the row) and tails ([Dp, 2 Dp)), zero past D. Four rows at a time: every lane reads
// them before any lane writes (a row's heads and tails overwrite words that other lanes read).
__device__ __forceinline__ void fa_split_rows(float* rows, int D, float f) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, Dp = (D + 15) & ~15, C = Dp >> 2;   // C: chunks of 4 a row
    int warps = blockDim.x >> 5;
    #pragma unroll 1
    for (int r0 = 0; r0 < FA_KEYS / warps; r0 += 4) {          // the warp's rows warp + warps (r0 .. r0 + 3)
        float4 x[4];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int idx = lane + 32 * i, r = warp + warps * (r0 + idx / C), c = idx % C;
            x[i] = make_float4(0.f, 0.f, 0.f, 0.f);
            if (idx < 4 * C && 4 * c < D) x[i] = *(const float4*)(rows + r * FA_KLD + 4 * c);
        }
        __syncwarp();
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            int idx = lane + 32 * i, r = warp + warps * (r0 + idx / C), c = idx % C;
            if (idx >= 4 * C) break;
            u32 h01, t01, h23, t23;
            f16_split2(x[i].x * f, x[i].y * f, &h01, &t01);
            f16_split2(x[i].z * f, x[i].w * f, &h23, &t23);
            unsigned short* row = (unsigned short*)(rows + r * FA_KLD);
            *(uint2*)(row + 4 * c) = make_uint2(h01, h23);
            *(uint2*)(row + Dp + 4 * c) = make_uint2(t01, t23);
        }
    }
}

// MODE: FA_F16, FA_F32 or FA_SPLIT; KV: what kcache / vcache hold (FA_F32: float; else f16 bits: the cache's, or
// halo_kv_split's rows of heads then tails, whose tiles start at multiples of FA_KEYS and whose factors are in
// `scales`). DK: the head size where the entry knows it at compile time (64, 128), else 0 and D_ at run time. With
// D a constant the loops over head dims lose their `break`s, so a tile's MMA chains sit in one basic block and
// interleave (run 17's SASS: the P V chains of each 16-dim slice behind a branch of their own).
template <int DK, int MODE, typename KV>
__device__ __forceinline__ void attention_mma(FaSmem<MODE>& sm, const float* qkv, i32 ld, const KV* kcache,
        const KV* vcache, const i32* positions, const i32* token_seq, const i32* block_tables, i32 bt_width, i32 bs,
        i32 H, i32 Hkv, i32 D_, float scale, i32 window, i32 T, const float* sinks, float* out,
        const float4* scales) {
    constexpr bool SPLIT = MODE != FA_F16;       // float32 cache: K and V as f16 head + tail (3 MMAs a product)
    constexpr bool ASYNC = MODE != FA_F32;       // tiles copied by cp.async, double-buffered
    constexpr int KC = FA_MAX_D / 16, LD = SPLIT ? 2 * FA_KLD : FH_LD;   // LD: f16 elements per shared row
    const int D = DK ? DK : D_, Dp = (D + 15) & ~15;
    i32* s_pos = sm.s_pos; i32* s_lo = sm.s_lo; i32* s_seq = sm.s_seq;
    int G = H / Hkv, BT = (blockDim.x >> 1) / G, hk = blockIdx.y, tok0 = blockIdx.x * BT;   // BT: tokens a block
    int ntok = min(BT, T - tok0);
    int lane = threadIdx.x & 31, q = lane & 3, mi = lane >> 3;
    if constexpr (ASYNC)
        for (int i = threadIdx.x; i < 2 * FA_KEYS; i += blockDim.x)  // K's dims D .. D + 7 of a half-used k chunk
            for (int d = D; d < Dp; d++) {
                sm.t.Ks[i / FA_KEYS][(i % FA_KEYS) * LD + d] = 0;
                if constexpr (SPLIT) sm.t.Ks[i / FA_KEYS][(i % FA_KEYS) * LD + Dp + d] = 0;     // and of its tails
            }
    FaRows R = fa_rows(qkv, ld, positions, token_seq, window, G, hk, D, tok0, ntok, s_pos, s_lo, s_seq);
    // Q's A fragments: rows g, g + 8; dims 16 kc + 2q (+1) | + 8 (+9). x[e]: row (e & 1 ? g + 8 : g), dim
    // 16 kc + 2q + (e >> 1 & 1) + 8 (e >> 2)
    const float scale2 = scale * FA_LOG2E;       // scores in log2 units: each exponent below is exp2_ftz
    auto q_at = [&](int kc, int e) {
        int d = 16 * kc + 2 * q + ((e >> 1) & 1) + 8 * (e >> 2);
        const float* row = R.qrow[e & 1];
        return row && d < D ? row[d] * scale2 : 0.0f;
    };
    float qf[2] = {1.0f, 1.0f}, qinv[2] = {1.0f, 1.0f};   // each row's power of two (float32 cache) and its inverse
    if constexpr (SPLIT) {
        float qpeak[2] = {0.0f, 0.0f};
        #pragma unroll
        for (int kc = 0; kc < KC; kc++)
            #pragma unroll
            for (int e = 0; e < 8; e++) qpeak[e & 1] = fmaxf(qpeak[e & 1], fabsf(q_at(kc, e)));
        #pragma unroll
        for (int r = 0; r < 2; r++) {            // over the row's 4 lanes
            qpeak[r] = fmaxf(qpeak[r], SHFL_XOR(qpeak[r], 1));
            qpeak[r] = fmaxf(qpeak[r], SHFL_XOR(qpeak[r], 2));
            qf[r] = fa_pow2_for(qpeak[r], &qinv[r]);
        }
    }
    u32 qh[KC][4], ql[KC][4];
    #pragma unroll
    for (int kc = 0; kc < KC; kc++) {
        float x[8];
        #pragma unroll
        for (int e = 0; e < 8; e++) x[e] = q_at(kc, e) * qf[e & 1];
        f16_split2(x[0], x[2], &qh[kc][0], &ql[kc][0]);
        f16_split2(x[1], x[3], &qh[kc][1], &ql[kc][1]);
        f16_split2(x[4], x[6], &qh[kc][2], &ql[kc][2]);
        f16_split2(x[5], x[7], &qh[kc][3], &ql[kc][3]);
    }
    float of[FA_MAX_D / 8][4];
    #pragma unroll
    for (int n = 0; n < FA_MAX_D / 8; n++) of[n][0] = of[n][1] = of[n][2] = of[n][3] = 0.0f;
    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f};     // l: this lane's part of the row sum
    float vsc = 1.0f;                            // O's units: the last tile's V factor (split caches)
    // Shared memory by 32-bit shared-window byte address (as tch, run 20): each lane's ldmatrix rows taken once, K's
    // (keys 8 (mi >> 1) + (lane & 7), dims 8 (mi & 1)) and V's (keys 8 (mi & 1) + (lane & 7), dims 8 (mi >> 1));
    // a tile adds its buffer, and each k chunk / n tile a constant
    constexpr int BUF_BYTES = ASYNC ? (int)sizeof(sm.t.Ks) / 2 : 0;  // the second of two buffers
    const saddr k_tiles = shared_addr(sm.t.Ks), v_tiles = shared_addr(sm.t.Vs);
    const saddr k_lane = k_tiles + 2 * ((8 * (mi >> 1) + (lane & 7)) * LD + 8 * (mi & 1));
    const saddr v_lane = v_tiles + 2 * ((8 * (mi & 1) + (lane & 7)) * LD + 8 * (mi >> 1));
    for (int i = 0; i < ntok; i++) {             // each sequence of the block once
        int jlo, jhi;
        if (!fa_sequence_keys(i, ntok, s_seq, s_lo, s_pos, &jlo, &jhi)) continue;
        int s = s_seq[i];
        const i32* table = block_tables + (size_t)s * bt_width;
        // f16 cache / split rows: keys j0 .. j0 + FA_KEYS - 1 into buffer buf (zeros past jhi), in chunks of 8 f16
        // (a split row: D / 8 of heads, then D / 8 of tails, to Dp), and a split tile's factors. Unrolled over the
        // most chunks a thread copies (a block has at least 2 FA_ROWS[0] = 128 threads), so the block-table loads
        // and address arithmetic of a thread's chunks overlap instead of each chunk waiting for its own.
        auto fetch = [&](int j0, int buf) {
            if constexpr (ASYNC) {
                constexpr int PARTS = SPLIT ? 2 : 1, CHUNKS = PARTS * FA_KEYS * (DK ? DK : FA_MAX_D) / 8;
                const int row_chunks = PARTS * (D >> 3);
                #pragma unroll
                for (int i = 0; i < (CHUNKS + 127) / 128; i++) {
                    int idx = threadIdx.x + i * blockDim.x;
                    if (idx >= FA_KEYS * row_chunks) break;
                    int kr = idx / row_chunks, c = idx - kr * row_chunks, j = min(j0 + kr, jhi);
                    size_t off = kv_row_at(table, j, bs, Hkv, hk, PARTS * D * sizeof(KV), 8 * c * sizeof(KV));
                    int at = kr * LD + (SPLIT && c >= (D >> 3) ? Dp - D : 0) + 8 * c;
                    int bytes = j0 + kr <= jhi ? 16 : 0;
                    cp_async16_at(k_tiles + buf * BUF_BYTES + 2 * at, (const char*)kcache + off, bytes);
                    cp_async16_at(v_tiles + buf * BUF_BYTES + 2 * at, (const char*)vcache + off, bytes);
                }
                if constexpr (MODE == FA_SPLIT)
                    if (threadIdx.x == 0)
                        cp_async16(&sm.t.sc[buf], scales + (kv_slot(table, j0, bs) / FA_SCALE_KEYS) * Hkv + hk, 16);
                cp_async_commit();
            }
        };
        if constexpr (MODE == FA_SPLIT) jlo &= ~(FA_KEYS - 1);   // the split tiles start at multiples of FA_KEYS
        if (jlo <= jhi) fetch(jlo, 0);
        for (int j0 = jlo, buf = 0; j0 <= jhi; j0 += FA_KEYS, buf ^= 1) {
            // this lane's rows of the tile (f16 rows; float32 cache: heads, tails 2 Dp bytes further)
            const saddr kt = k_lane + buf * BUF_BYTES, vt = v_lane + buf * BUF_BYTES;
            float sf[2], vinv = 1.0f, vf = 1.0f;  // S's factor per row (a power of two); P V's and its inverse
            if constexpr (!ASYNC) {
                __syncthreads();                 // every warp is done with the last tile
                fa_stage32(sm.t, kcache, vcache, table, j0, jhi, bs, Hkv, hk, D);
                __syncthreads();
                float pk = 0.0f, pv = 0.0f;
                #pragma unroll
                for (int w = 0; w < FA_MAX_ROWS / 16; w++) {
                    if (32 * w >= (int)blockDim.x) break;
                    pk = fmaxf(pk, sm.t.peak[0][w]);
                    pv = fmaxf(pv, sm.t.peak[1][w]);
                }
                float kinv, kf = fa_pow2_for(pk, &kinv);
                vf = fa_pow2_for(pv, &vinv);
                fa_split_rows(sm.t.Ks, D, kf);
                fa_split_rows(sm.t.Vs, D, vf);
                __syncthreads();
                if (j0 + FA_KEYS <= jhi) fa_prefetch32(kcache, vcache, table, j0 + FA_KEYS, jhi, bs, Hkv, hk, D);
                sf[0] = qinv[0] * kinv;
                sf[1] = qinv[1] * kinv;
            } else {
                cp_async_wait_all();
                __syncthreads();                 // tile j0 is in; every warp is done with the other buffer
                if (j0 + FA_KEYS <= jhi) fetch(j0 + FA_KEYS, buf ^ 1);
                float kinv = 1.0f;
                if constexpr (MODE == FA_SPLIT) {
                    kinv = sm.t.sc[buf].x;
                    vinv = sm.t.sc[buf].y;
                    vf = sm.t.sc[buf].z;
                }
                sf[0] = qinv[0] * kinv;
                sf[1] = qinv[1] * kinv;
            }
            if (!fa_warp_sees_tile(R, s, j0)) continue;     // the whole warp masked (past its diagonal)
            // S: 4 n tiles of 8 keys; the head x head products in one chain set, the tail terms in the other
            float sh[FA_KEYS / 8][4], sl[FA_KEYS / 8][4];
            #pragma unroll
            for (int n = 0; n < FA_KEYS / 8; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) { sh[n][e] = 0.0f; sl[n][e] = 0.0f; }
            #pragma unroll
            for (int kc = 0; kc < KC; kc++) {
                if (16 * kc >= D) break;
                #pragma unroll
                for (int np = 0; np < FA_KEYS / 16; np++) {   // n tiles 2 np, 2 np + 1: matrices (keys, dims) x 4
                    const saddr kb = kt + 2 * (16 * np * LD + 16 * kc);
                    u32 b[4], bt[4];
                    ldmatrix_x4_at(b, kb);
                    if constexpr (SPLIT) ldmatrix_x4_at(bt, kb + 2 * Dp);
                    #pragma unroll
                    for (int h = 0; h < 2; h++) {
                        float* cl = sl[2 * np + h];
                        mma_f16(cl, ql[kc][0], ql[kc][1], ql[kc][2], ql[kc][3], b[2 * h], b[2 * h + 1]);
                        if constexpr (SPLIT)
                            mma_f16(cl, qh[kc][0], qh[kc][1], qh[kc][2], qh[kc][3], bt[2 * h], bt[2 * h + 1]);
                        mma_f16(sh[2 * np + h], qh[kc][0], qh[kc][1], qh[kc][2], qh[kc][3], b[2 * h], b[2 * h + 1]);
                    }
                }
            }
            #pragma unroll
            for (int n = 0; n < FA_KEYS / 8; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) sh[n][e] += sl[n][e];    // x sf[r] in the exponents and maxima below
            if (!fa_warp_inside_tile(R, s, j0))  // a key a row may not see: -inf
                #pragma unroll
                for (int n = 0; n < FA_KEYS / 8; n++)
                    #pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int r = e >> 1, j = j0 + 8 * n + 2 * q + (e & 1);
                        if (!fa_key_allowed(R.rseq[r], R.rlo[r], R.rpos[r], s, j)) sh[n][e] = NEG_INF;
                    }
            float mx[2] = {NEG_INF, NEG_INF};
            #pragma unroll
            for (int n = 0; n < FA_KEYS / 8; n++)
                #pragma unroll
                for (int e = 0; e < 4; e++) mx[e >> 1] = fmaxf(mx[e >> 1], sh[n][e]);
            mx[0] *= sf[0];                      // a power of two: the maximum of the scores times it, exactly
            mx[1] *= sf[1];
            float base[2], corr[2];
            fa_rescale(mx, m, l, base, corr);
            // O in units of the last tile's V factor (split caches: O = of x vsc), so a tile's factor joins the
            // rows' rescale (powers of two, exact) and its P V adds to O without a multiply of its own (run 28: 64
            // FMULs a tile, -3.5% at depth). Range: of = O x (~2^14 / the last tile's largest |V|) stays finite while
            // a kv head's largest |V| per tile varies by less than 2^100 over a sequence (an all-zero tile's factor
            // is 1).
            float oc[2] = {corr[0], corr[1]};
            if constexpr (SPLIT) {
                oc[0] *= vsc * vf;
                oc[1] *= vsc * vf;
                vsc = vinv;
            }
            // The f16 cache's P V goes straight into O's fragments (as flash-attention's does): O is rescaled first,
            // only in tiles where a row of the warp has a new maximum. The MMA's own accumulation (not IEEE: ~2^-23
            // of O a tile) is invisible beside the cache's f16 rounding (2^-11); the float32 caches keep each tile's
            // P V in a fresh fragment, added in float32. Run 29, H100, Qwen3-4B shapes at depth 14,336: 3,287 ->
            // 3,025 us a layer (the loop 625 -> ~565 instructions, no spills).
            if constexpr (!SPLIT)
                if (__any_sync(0xffffffffu, oc[0] != 1.0f || oc[1] != 1.0f))
                    #pragma unroll
                    for (int n = 0; n < FA_MAX_D / 8; n++) {
                        of[n][0] *= oc[0]; of[n][1] *= oc[0];
                        of[n][2] *= oc[1]; of[n][3] *= oc[1];
                    }
            // P's A fragments for key chunk kk (n tiles 2 kk, 2 kk + 1): a0 row g keys 2q.., a1 row g + 8, a2 / a3
            // + 8 keys
            u32 ph[FA_KEYS / 16][4], pl[FA_KEYS / 16][4];
            #pragma unroll
            for (int kk = 0; kk < FA_KEYS / 16; kk++)
                #pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float* c = sh[2 * kk + h];
                    float p0 = exp2_ftz(fmaf(c[0], sf[0], -base[0])), p1 = exp2_ftz(fmaf(c[1], sf[0], -base[0]));
                    float p2 = exp2_ftz(fmaf(c[2], sf[1], -base[1])), p3 = exp2_ftz(fmaf(c[3], sf[1], -base[1]));
                    l[0] += p0 + p1;
                    l[1] += p2 + p3;
                    f16_split2(p0, p1, &ph[kk][2 * h], &pl[kk][2 * h]);
                    f16_split2(p2, p3, &ph[kk][2 * h + 1], &pl[kk][2 * h + 1]);
                }
            #pragma unroll
            for (int np = 0; np < FA_MAX_D / 16; np++) {  // output n tiles 2 np, 2 np + 1
                if (16 * np >= D) break;
                float part[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
                #pragma unroll
                for (int kk = 0; kk < FA_KEYS / 16; kk++) {
                    // matrices (keys 16 kk + 8 (mi & 1) .., dims 16 np + 8 (mi >> 1) ..)
                    const saddr vb = vt + 2 * (16 * kk * LD + 16 * np);
                    u32 b[4], bt[4];
                    ldmatrix_x4_trans_at(b, vb);
                    if constexpr (SPLIT) ldmatrix_x4_trans_at(bt, vb + 2 * Dp);
                    #pragma unroll
                    for (int h = 0; h < 2; h++) {
                        float* acc = SPLIT ? part[h] : of[2 * np + h];
                        mma_f16(acc, pl[kk][0], pl[kk][1], pl[kk][2], pl[kk][3], b[2 * h], b[2 * h + 1]);
                        if constexpr (SPLIT)
                            mma_f16(acc, ph[kk][0], ph[kk][1], ph[kk][2], ph[kk][3], bt[2 * h], bt[2 * h + 1]);
                        mma_f16(acc, ph[kk][0], ph[kk][1], ph[kk][2], ph[kk][3], b[2 * h], b[2 * h + 1]);
                    }
                }
                #pragma unroll
                for (int h = 0; h < 2 && SPLIT; h++) {
                    float* o = of[2 * np + h];
                    o[0] = o[0] * oc[0] + part[h][0];
                    o[1] = o[1] * oc[0] + part[h][1];
                    o[2] = o[2] * oc[1] + part[h][2];
                    o[3] = o[3] * oc[1] + part[h][3];
                }
            }
        }
        if constexpr (ASYNC) {
            cp_async_wait_all();                 // nothing in flight when the next sequence's fetch starts
            __syncthreads();
        }
    }
    fa_write_rows(R, of, m, l, G, hk, H, D, tok0, sinks, out, vsc);
}
#endif

#define FA_ARGS qkv, ld, kcache, vcache, positions, token_seq, block_tables, bt_width, bs, H, Hkv, D, scale, window, \
                T, sinks, out, scales
// One instance per common head size (64: SmolLM2, Qwen2.5-0.5B; 128: Llama, Qwen3) and one for any other D. Run 18,
// H100, Qwen3-4B shapes, f16 cache: its part of a 512-token step at depth 4k 14.5 -> 11.8 ms, at 16k 56.9 -> 44.6 ms
// (the D 128 main loop 895 -> 778 instructions).
#if HALO_TC
#define FA_DISPATCH(MODE, SM)                                                                                        \
    if (D == 128) attention_mma<128, MODE>(SM, FA_ARGS); else if (D == 64) attention_mma<64, MODE>(SM, FA_ARGS);     \
    else attention_mma<0, MODE>(SM, FA_ARGS);
#define FA_STATIC(MODE) const float4* scales = 0; __shared__ FaSmem<MODE> sm; FA_DISPATCH(MODE, sm)
#define FA_DYNAMIC(MODE) extern __shared__ float sm[];                                                             \
    static_assert(sizeof(FaSmem<MODE>) <= FA_SPLIT_SHARED_BYTES, "FA_SPLIT_SHARED_BYTES is short");                 \
    FA_DISPATCH(MODE, *reinterpret_cast<FaSmem<MODE>*>(sm))
#else
#define FA_STATIC(MODE)
#define FA_DYNAMIC(MODE)
#endif
#define ATTENTION_TC_ENTRY(NAME, KV, MODE, SMEM, SCALES)                                                             \
HALO_KERNEL __launch_bounds__(2 * FA_MAX_ROWS) void NAME(const float* qkv, i32 ld, const KV* kcache,               \
        const KV* vcache, const i32* positions, const i32* token_seq, const i32* block_tables, i32 bt_width,        \
        i32 bs, i32 H, i32 Hkv, i32 D, float scale, i32 window, i32 T, const float* sinks, float* out SCALES) {      \
    GRID_DEPENDENCY_SYNC();                                                                                          \
    SMEM(MODE)                                                                                                       \
}
#define FA_NO_SCALES
#define FA_SCALES_ARG , const float4* scales
ATTENTION_TC_ENTRY(halo_attention_tc, float, FA_F32, FA_STATIC, FA_NO_SCALES)
ATTENTION_TC_ENTRY(halo_attention_tc_f16, unsigned short, FA_F16, FA_STATIC, FA_NO_SCALES)
// The float32 cache's tile on halo_kv_split's rows (kcache / vcache: its split copies; scales: its factors), for
// steps whose blocks of queries would each split the same keys again (prefill; not a graph's decode step)
ATTENTION_TC_ENTRY(halo_attention_tc_split, unsigned short, FA_SPLIT, FA_DYNAMIC, FA_SCALES_ARG)

// halo_attention_tc_split's operands, once a step: each sequence's keys 0 .. seq_lens[s] - 1 of kv head hk in tiles
// of FA_KEYS from key 0, split as halo_attention_tc splits a tile (fa_pow2_for of the tile's largest |K|, and of its
// largest |V|; f16 heads then tails). A key's row goes to its own slot's place (split + 2 kv_row: every slot has
// one owner, so rows never collide) and the tile's (1 / K's factor, 1 / V's factor, V's factor, 0) to
// scales[(slot of its first key / FA_SCALE_KEYS) Hkv + hk]. Memory-bound (a read and a write of each key): ~1% of
// the attention that follows at depth. Grid (tiles of the longest sequence, sequences, Hkv); 128 threads.
__device__ __forceinline__ float kv_split_rows(const float* cache, unsigned short* split, const i32* table, int j0,
                                               int n, int bs, int Hkv, int hk, int D, float* red, float* f_out) {
#if HALO_TC
    int D4 = D >> 2;
    float peak = 0.0f;
    for (int idx = threadIdx.x; idx < FA_KEYS * D4; idx += blockDim.x) {
        int kr = idx / D4, j = j0 + kr;
        if (j < n) peak = fmaxf(peak, max_abs4(*(const float4*)(cache + kv_row(table, j, bs, Hkv, hk, D)
                                                                 + 4 * (idx - kr * D4))));
    }
    float inv, f = fa_pow2_for(block_max(peak, red), &inv);
    *f_out = f;
    for (int idx = threadIdx.x; idx < FA_KEYS * D4; idx += blockDim.x) {
        int kr = idx / D4, c = idx - kr * D4, j = j0 + kr;
        if (j >= n) continue;
        size_t row = kv_row(table, j, bs, Hkv, hk, D);
        float4 x = *(const float4*)(cache + row + 4 * c);
        u32 h01, t01, h23, t23;
        f16_split2(x.x * f, x.y * f, &h01, &t01);
        f16_split2(x.z * f, x.w * f, &h23, &t23);
        *(uint2*)(split + 2 * row + 4 * c) = make_uint2(h01, h23);
        *(uint2*)(split + 2 * row + D + 4 * c) = make_uint2(t01, t23);
    }
    return inv;
#else
    *f_out = 0.0f;
    return 0.0f;
#endif
}

HALO_KERNEL __launch_bounds__(128) void halo_kv_split(const float* kcache, const float* vcache, const i32* seq_lens,
        const i32* block_tables, i32 bt_width, i32 bs, i32 Hkv, i32 D, unsigned short* ksplit,
        unsigned short* vsplit, float4* scales) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32];
    int s = blockIdx.y, hk = blockIdx.z, j0 = blockIdx.x * FA_KEYS, n = seq_lens[s];
    if (j0 >= n) return;
    const i32* table = block_tables + (size_t)s * bt_width;
    float kf, vf, kinv = kv_split_rows(kcache, ksplit, table, j0, n, bs, Hkv, hk, D, red, &kf);
    float vinv = kv_split_rows(vcache, vsplit, table, j0, n, bs, Hkv, hk, D, red, &vf);
    if (threadIdx.x == 0)
        scales[(kv_slot(table, j0, bs) / FA_SCALE_KEYS) * Hkv + hk] = make_float4(kinv, vinv, vf, 0.0f);
}

// Tiled prefill attention without tensor cores, "ts" (SIMT float32 FMAs; CUDA and HIP alike, the prefill form
// where halo_attention_tc is not built: HIP, including Strix Halo's gfx1151). halo_attention reads every key and
// value once per (token, head), so a long prompt's prefill moves T^2 / 2 x H rows of the cache through memory; here a
// block takes R query rows (R / G tokens x the G heads of one KV head, as the tensor-core tile) and each key / value
// tile in shared memory serves all R rows. Same contract, masks, mixed-sequence walk, online softmax and sinks as
// halo_attention_tc, in float32 throughout.
// Builds per head-size class DC (D <= DC, D % 4 == 0): R x TK = 32 x 32 for DC 64 / 128, 16 x 16 for DC 256 (under
// 48 KB of static shared memory, as both runtimes take without opting in). Block: 128 threads; grid:
// (ceil(T / (R / G)), Hkv); G <= R. Per key tile, with a barrier after each phase:
//   K in; scores: a thread takes rows rg + 16 i x keys kg + 8 j (rg = t / 8, kg = t % 8), dot products 4 dims at a
//     time from Qs and Ks (the 8 key rows a quarter-warp reads sit in 8 distinct bank quads);
//   V in, over K; softmax: TPR = 128 / R threads a row, each a run of TK / TPR keys: the tile's row maximum by
//     shuffles, the rescale, P^T into Pt and the rescale factor into Cs;
//   O: a thread keeps rows R / 8 og .. + R / 8 - 1 (og = t / 16) x dims 4 dg + 64 i (dg = t % 16) in registers,
//     rescaled, plus P V over the tile's keys.
template <int DC> struct TsShape;
template <> struct TsShape<64> { enum { R = 32, TK = 32 }; };
template <> struct TsShape<128> { enum { R = 32, TK = 32 }; };
template <> struct TsShape<256> { enum { R = 16, TK = 16 }; };

template <typename KV, int DC>
__device__ __forceinline__ void ts_load_tile(const KV* cache, const i32* table, int bs, int Hkv, int hk, int D,
                                             int j0, int jhi, float* dst) {
    constexpr int LD = DC + 4;
    int D4 = D >> 2;
    for (int idx = threadIdx.x; idx < ((TsShape<DC>::TK * D) >> 2); idx += blockDim.x) {
        int kr = idx / D4, c = idx - kr * D4, j = j0 + kr;
        float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (j <= jhi) kv_load4(cache + kv_row(table, j, bs, Hkv, hk, D) + 4 * c, v);
        *(float4*)(dst + kr * LD + 4 * c) = make_float4(v[0], v[1], v[2], v[3]);
    }
}

template <typename KV, int DC>
__device__ void attention_ts(const float* qkv, i32 ld, const KV* kcache, const KV* vcache, const i32* positions,
                             const i32* token_seq, const i32* block_tables, i32 bt_width, i32 bs, i32 H, i32 Hkv,
                             i32 D, float scale, i32 window, i32 T, const float* sinks, float* out) {
    constexpr int R = TsShape<DC>::R, TK = TsShape<DC>::TK, LD = DC + 4;
    constexpr int SR = R / 16, SK = TK / 8;           // scores: rows x keys a thread
    constexpr int TPR = 128 / R, KPT = TK / TPR;       // softmax: threads a row, keys a thread
    constexpr int OR = R / 8, OD = DC / 16;            // O: rows x dims a thread
    __shared__ __align__(16) float Qs[R * LD];         // the block's rows of q, scaled; rows past the step's are 0
    __shared__ __align__(16) float KVs[TK * LD];       // the tile's keys, then its values
    __shared__ float Ss[R * (TK + 1)];                 // scores, masked with -inf
    __shared__ __align__(16) float Pt[TK * (R + 4)];   // probabilities, key-major
    __shared__ float Cs[R], Ms[R], Ls[R];              // per row: the tile's rescale; at the end m and l
    __shared__ i32 s_pos[R], s_lo[R], s_seq[R];
    int G = H / Hkv, BT = R / G, hk = blockIdx.y, tok0 = blockIdx.x * BT;
    int ntok = min(BT, T - tok0), t = threadIdx.x;
    if (t < ntok) {
        int pos = positions[tok0 + t];
        s_pos[t] = pos;
        s_lo[t] = window > 0 ? max(0, pos - window + 1) : 0;
        s_seq[t] = token_seq[tok0 + t];
    }
    int D4 = D >> 2;
    for (int idx = t; idx < R * D4; idx += blockDim.x) {
        int r = idx / D4, c = idx - r * D4, rt = r / G;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (rt < ntok) {
            const float* q = qkv + (size_t)(tok0 + rt) * ld + (size_t)(hk * G + r % G) * D + 4 * c;
            v = make_float4(q[0] * scale, q[1] * scale, q[2] * scale, q[3] * scale);
        }
        *(float4*)(Qs + r * LD + 4 * c) = v;
    }
    __syncthreads();
    // this thread's score rows (sequence, first and last allowed key; -1: past the step's tokens)
    int kg = t & 7, rg = t >> 3;
    int sseq[SR], slo[SR], spos[SR];
    #pragma unroll
    for (int i = 0; i < SR; i++) {
        int rt = (rg + 16 * i) / G;
        bool valid = rt < ntok;
        sseq[i] = valid ? s_seq[rt] : -1;
        slo[i] = valid ? s_lo[rt] : 0;
        spos[i] = valid ? s_pos[rt] : -1;
    }
    int row = t / TPR, sub = t % TPR;                  // softmax: this thread's row and run of keys
    float m = NEG_INF, l = 0.0f;                       // the row's running maximum; this thread's part of its sum
    int og = t >> 4, dg = t & 15;
    float o[OR][OD];
    #pragma unroll
    for (int i = 0; i < OR; i++)
        #pragma unroll
        for (int e = 0; e < OD; e++) o[i][e] = 0.0f;
    for (int i = 0; i < ntok; i++) {                   // each sequence of the block once
        int jlo, jhi;
        if (!fa_sequence_keys(i, ntok, s_seq, s_lo, s_pos, &jlo, &jhi)) continue;
        int s = s_seq[i];
        const i32* table = block_tables + (size_t)s * bt_width;
        for (int j0 = jlo; j0 <= jhi; j0 += TK) {
            ts_load_tile<KV, DC>(kcache, table, bs, Hkv, hk, D, j0, jhi, KVs);
            __syncthreads();
            float sc[SR][SK];
            #pragma unroll
            for (int a = 0; a < SR; a++)
                #pragma unroll
                for (int b = 0; b < SK; b++) sc[a][b] = 0.0f;
            for (int d = 0; d < D; d += 4) {
                float4 q4[SR], k4[SK];
                #pragma unroll
                for (int a = 0; a < SR; a++) q4[a] = *(const float4*)(Qs + (rg + 16 * a) * LD + d);
                #pragma unroll
                for (int b = 0; b < SK; b++) k4[b] = *(const float4*)(KVs + (kg + 8 * b) * LD + d);
                #pragma unroll
                for (int a = 0; a < SR; a++)
                    #pragma unroll
                    for (int b = 0; b < SK; b++)
                        sc[a][b] += q4[a].x * k4[b].x + q4[a].y * k4[b].y + q4[a].z * k4[b].z + q4[a].w * k4[b].w;
            }
            #pragma unroll
            for (int a = 0; a < SR; a++)
                #pragma unroll
                for (int b = 0; b < SK; b++) {
                    int j = j0 + kg + 8 * b;
                    bool ok = fa_key_allowed(sseq[a], slo[a], spos[a], s, j);
                    Ss[(rg + 16 * a) * (TK + 1) + kg + 8 * b] = ok ? sc[a][b] : NEG_INF;
                }
            __syncthreads();
            ts_load_tile<KV, DC>(vcache, table, bs, Hkv, hk, D, j0, jhi, KVs);    // K is read: V over it
            float mx = NEG_INF;
            #pragma unroll
            for (int k = 0; k < KPT; k++) mx = fmaxf(mx, Ss[row * (TK + 1) + sub * KPT + k]);
            #pragma unroll
            for (int w = 1; w < TPR; w <<= 1) mx = fmaxf(mx, SHFL_XOR(mx, w));
            float mn = fmaxf(m, mx), base = mn == NEG_INF ? 0.0f : mn, corr = __expf(m - base);
            m = mn;
            l *= corr;
            #pragma unroll
            for (int k = 0; k < KPT; k++) {
                int key = sub * KPT + k;
                float p = __expf(Ss[row * (TK + 1) + key] - base);
                l += p;
                Pt[key * (R + 4) + row] = p;
            }
            if (sub == 0) Cs[row] = corr;
            __syncthreads();
            int nk = min(TK, jhi - j0 + 1);
            #pragma unroll
            for (int i2 = 0; i2 < OR; i2++) {
                float c = Cs[OR * og + i2];
                #pragma unroll
                for (int e = 0; e < OD; e++) o[i2][e] *= c;
            }
            for (int k = 0; k < nk; k++) {
                float p[OR];
                #pragma unroll
                for (int i2 = 0; i2 < OR; i2++) p[i2] = Pt[k * (R + 4) + OR * og + i2];
                #pragma unroll
                for (int e4 = 0; e4 < OD / 4; e4++) {
                    float4 v = *(const float4*)(KVs + k * LD + 4 * dg + 64 * e4);
                    #pragma unroll
                    for (int i2 = 0; i2 < OR; i2++) {
                        o[i2][4 * e4] += p[i2] * v.x;
                        o[i2][4 * e4 + 1] += p[i2] * v.y;
                        o[i2][4 * e4 + 2] += p[i2] * v.z;
                        o[i2][4 * e4 + 3] += p[i2] * v.w;
                    }
                }
            }
            __syncthreads();                           // KVs, Pt and Cs are free for the next tile
        }
    }
    #pragma unroll
    for (int w = 1; w < TPR; w <<= 1) l += SHFL_XOR(l, w);
    if (sub == 0) { Ms[row] = m; Ls[row] = l; }
    __syncthreads();
    #pragma unroll
    for (int i2 = 0; i2 < OR; i2++) {
        int r = OR * og + i2, rt = r / G;
        if (rt >= ntok) continue;
        int h = hk * G + r % G;
        float mr = Ms[r], inv = 1.0f / Ls[r];
        if (sinks) {                                   // the sink joins the maximum and the denominator
            float S = sinks[h], Mt = fmaxf(mr, S), f = __expf(mr - Mt);
            inv = f / (Ls[r] * f + __expf(S - Mt));
        }
        float* dst = out + (size_t)(tok0 + rt) * H * D + (size_t)h * D;
        #pragma unroll
        for (int e4 = 0; e4 < OD / 4; e4++) {
            int d = 4 * dg + 64 * e4;
            if (d < D)
                *(float4*)(dst + d) = make_float4(o[i2][4 * e4] * inv, o[i2][4 * e4 + 1] * inv,
                                                  o[i2][4 * e4 + 2] * inv, o[i2][4 * e4 + 3] * inv);
        }
    }
}

#define ATTENTION_TS_ENTRY(NAME, KV, DC)                                                                             \
HALO_KERNEL __launch_bounds__(128) void NAME(const float* qkv, i32 ld, const KV* kcache, const KV* vcache,          \
        const i32* positions, const i32* token_seq, const i32* block_tables, i32 bt_width, i32 bs, i32 H, i32 Hkv,   \
        i32 D, float scale, i32 window, i32 T, const float* sinks, float* out) {                                     \
    GRID_DEPENDENCY_SYNC();                                                                                          \
    attention_ts<KV, DC>(qkv, ld, kcache, vcache, positions, token_seq, block_tables, bt_width, bs, H, Hkv, D, scale, \
                         window, T, sinks, out);                                                                     \
}
ATTENTION_TS_ENTRY(halo_attention_ts_d64, float, 64)
ATTENTION_TS_ENTRY(halo_attention_ts_d128, float, 128)
ATTENTION_TS_ENTRY(halo_attention_ts_d256, float, 256)
ATTENTION_TS_ENTRY(halo_attention_ts_d64_f16, unsigned short, 64)
ATTENTION_TS_ENTRY(halo_attention_ts_d128_f16, unsigned short, 128)
ATTENTION_TS_ENTRY(halo_attention_ts_d256_f16, unsigned short, 256)

// Residual and the next norm in one pass over a token's row (grid: T blocks):
//   if o:  x += post_w ? rmsnorm(o) * post_w : o
//   h = rmsnorm(x) * next_w
// Each thread holds its elements i = threadIdx.x + k blockDim.x in registers between the passes, so x and o are
// read once (the block-wide sums between the passes made a decode step's single block wait on three rounds
// of loads). Contract (host): E <= AN_PER * blockDim.x. Opens with GRID_DEPENDENCY_LATER: launched
// programmatically, so its launch hides behind the tail of the wo / down matvec before it, with its norm weights
// fetched into L2 meanwhile.
#define AN_PER 16
HALO_KERNEL void halo_add_norm(float* x, const float* o, const float* post_w, const float* next_w, float eps,
                               i32 E, float* h) {
    GRID_DEPENDENCY_LATER();
    for (int i = 32 * threadIdx.x; i < E; i += 32 * blockDim.x) {      // a 128-byte line per thread
        prefetch_l2(next_w + i);
        if (post_w) prefetch_l2(post_w + i);
    }
    grid_dependency_wait();
    __shared__ float red[32];
    int t = blockIdx.x;
    float* xr = x + (size_t)t * E;
    float xv[AN_PER], ov[AN_PER];
    float oss = 0.0f;
    #pragma unroll
    for (int k = 0; k < AN_PER; k++) {
        int i = threadIdx.x + k * blockDim.x;
        xv[k] = i < E ? xr[i] : 0.0f;
        ov[k] = (o && i < E) ? o[(size_t)t * E + i] : 0.0f;
        oss += ov[k] * ov[k];
    }
    if (o) {
        float inv = post_w ? 1.0f / sqrtf(block_sum(oss, red) / (float)E + eps) : 1.0f;
        #pragma unroll
        for (int k = 0; k < AN_PER; k++) {
            int i = threadIdx.x + k * blockDim.x;
            if (i >= E) break;
            xv[k] += post_w ? ov[k] * inv * post_w[i] : ov[k];
            xr[i] = xv[k];
        }
    }
    float ss = 0.0f;
    #pragma unroll
    for (int k = 0; k < AN_PER; k++) ss += xv[k] * xv[k];
    float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)E + eps);
    #pragma unroll
    for (int k = 0; k < AN_PER; k++) {
        int i = threadIdx.x + k * blockDim.x;
        if (i >= E) break;
        h[(size_t)t * E + i] = xv[k] * inv * next_w[i];
    }
}
