// Token choice on the device: greedy (argmax, lowest index on ties, as numpy) or sampled with temperature,
// top-k, top-p and min-p (the order of engine.sampling) and a counter-based RNG seeded per request, after
// the repetition penalty; plus, on request, the top-K (id, logit) pairs of the raw logits.
// One block (1024 threads) per logits row. Only the chosen ids (and the asked-for top pairs) leave the
// device, through the readback pool.
#define NTHREADS 1024


__device__ __forceinline__ u64 splitmix64(u64 x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Largest tau (as float bits in [lo, hi]) with f(tau) >= target, f nonincreasing: count or mass of p >= tau.
__device__ u32 search_tau(const float* row, i32 V, float m, float inv_temp, u32 lo, u32 hi, float target,
                          bool mass, float* red) {
    while (lo < hi) {
        u32 mid = lo + (hi - lo + 1) / 2;
        float tau = __int_as_float((int)mid), acc = 0.0f;
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float p = __expf((row[i] - m) * inv_temp);
            if (p >= tau) acc += mass ? p : 1.0f;
        }
        if (block_sum(acc, red) >= target) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// (value, index) pairs ordered by value, then lower index first: is (v, i) before (w, j)?
__device__ __forceinline__ bool before(float v, int i, float w, int j) { return v > w || (v == w && i < j); }

// The first pair in that order among row[i] for which after(prev) holds (all i when prev_i < 0): the block's
// argmax, every thread gets it. bv/bi: NTHREADS / 32 slots of shared memory.
__device__ void block_best(const float* row, i32 V, float prev_v, int prev_i, float* bv, int* bi,
                           float* out_v, int* out_i) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    float best = NEG_INF; int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = row[i];
        if (prev_i >= 0 && !before(prev_v, prev_i, v, i)) continue;
        if (idx == 0x7fffffff || before(v, i, best, idx)) { best = v; idx = i; }
    }
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = SHFL_XOR(best, o); int oi = SHFL_XOR(idx, o);
        if (oi != 0x7fffffff && (idx == 0x7fffffff || before(ov, oi, best, idx))) { best = ov; idx = oi; }
    }
    __syncthreads();                           // bv/bi may still be read from the previous call
    if (lane == 0) { bv[warp] = best; bi[warp] = idx; }
    __syncthreads();
    best = bv[0]; idx = bi[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); w++)
        if (bi[w] != 0x7fffffff && (idx == 0x7fffffff || before(bv[w], bi[w], best, idx))) { best = bv[w]; idx = bi[w]; }
    *out_v = best; *out_i = idx;
}

// samp_i [S, 4]: top_k, seed, counter (tokens drawn so far by the request), top pairs to report (0: none)
// samp_f [S, 4]: temperature (<= 0: greedy), top_p, min_p, repetition penalty (1: none)
// out_ids[s] = chosen id; next_ids (optional) too: the next decode step's input, never via the host.
// top_ids / top_vals [S, top_cap]: the first samp_i[3] pairs of the raw logits, best first.
// Repetition penalty (engine.sampling.apply_repetition_penalty on the device): the row's sequence has seen
// the ids at its KV positions 0 .. seq_len - 1 (token_at_slot, written by halo_embed_norm for every token of
// every step: prompt and outputs alike); `seen` [S, ceil(V / 32)] is a per-row bitmap that makes each id
// count once. The penalty changes the logits row in place (scratch, rewritten every step).
HALO_KERNEL void halo_sample(float* logits, i32 V, const i32* samp_i, const float* samp_f, i32* out_ids,
                             i32* next_ids, const i32* logits_idx, const i32* token_seq, const i32* seq_lens,
                             const i32* block_tables, i32 bt_width, i32 block_size, const i32* token_at_slot,
                             u32* seen, i32* top_ids, float* top_vals, i32 top_cap) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32];
    __shared__ float bv[NTHREADS / 32];
    __shared__ int bi[NTHREADS / 32];
    __shared__ float csum[NTHREADS];
    __shared__ int pick;
    int s = blockIdx.x;
    float* row = logits + (size_t)s * V;
    const i32* pi = samp_i + 4 * s;
    const float* pf = samp_f + 4 * s;
    // top pairs of the raw logits: one ordered argmax per pair ---------------------------------------------
    int n_top = min(pi[3], min(top_cap, V));
    float best = 0.0f; int idx = -1;
    for (int r = 0; r < n_top; r++) {
        block_best(row, V, best, idx, bv, bi, &best, &idx);
        if (threadIdx.x == 0) { top_ids[s * top_cap + r] = idx; top_vals[s * top_cap + r] = best; }
    }
    // repetition penalty over the ids this row's sequence has seen -------------------------------------
    float penalty = pf[3];
    if (penalty != 1.0f && penalty > 0.0f) {
        int W = (V + 31) >> 5, q = token_seq[logits_idx[s]], len = seq_lens[q];
        u32* bits = seen + (size_t)s * W;
        const i32* table = block_tables + (size_t)q * bt_width;
        for (int w = threadIdx.x; w < W; w += blockDim.x) bits[w] = 0u;
        __syncthreads();
        for (int p = threadIdx.x; p < len; p += blockDim.x) {
            int id = token_at_slot[kv_slot(table, p, block_size)];
            if (id < 0 || id >= V) continue;
            u32 bit = 1u << (id & 31);
            if (atomicOr(bits + (id >> 5), bit) & bit) continue;       // another position has it: once only
            float l = row[id];
            row[id] = l > 0.0f ? l / penalty : l * penalty;
        }
        __syncthreads();
    }
    // argmax ------------------------------------------------------------------------------------------
    block_best(row, V, 0.0f, -1, bv, bi, &best, &idx);
    float temp = pf[0];
    int top_k = pi[0];
    if (!(temp > 0.0f) || top_k == 1 || !isfinite(best)) {
        if (threadIdx.x == 0) { out_ids[s] = idx; if (next_ids) next_ids[s] = idx; }
        return;
    }
    // thresholds on p_i = exp((l_i - max) / T), so the best token has p = 1 -----------------------------
    float inv_temp = 1.0f / temp, m = best;
    const u32 ONE = 0x3f800000u;
    u32 tau = 0;
    if (top_k > 0 && top_k < V) tau = search_tau(row, V, m, inv_temp, 0, ONE, (float)top_k, false, red);
    float top_p = pf[1];
    if (top_p < 1.0f) {
        float zk = 0.0f, tk = __int_as_float((int)tau);
        for (int i = threadIdx.x; i < V; i += blockDim.x) {
            float p = __expf((row[i] - m) * inv_temp);
            if (p >= tk) zk += p;
        }
        zk = block_sum(zk, red);
        tau = search_tau(row, V, m, inv_temp, tau, ONE, top_p * zk, true, red);
    }
    float tf = __int_as_float((int)tau);
    float min_p = pf[2];
    if (min_p > 0.0f) tf = fmaxf(tf, min_p);
    // draw: u * Z, then the first index (in vocabulary order) whose running kept mass passes it ---------
    int chunk = (V + blockDim.x - 1) / blockDim.x, beg = threadIdx.x * chunk, end = min(V, beg + chunk);
    float mine = 0.0f;
    for (int i = beg; i < end; i++) {
        float p = __expf((row[i] - m) * inv_temp);
        if (p >= tf) mine += p;
    }
    csum[threadIdx.x] = mine;
    if (threadIdx.x == 0) pick = idx;
    __syncthreads();
    if (threadIdx.x == 0) {                    // inclusive scan of 1024 chunk sums: cheap next to the passes
        float run = 0.0f;
        for (int i = 0; i < (int)blockDim.x; i++) { run += csum[i]; csum[i] = run; }
    }
    __syncthreads();
    float total = csum[blockDim.x - 1];
    u64 key = ((u64)(u32)pi[1] << 32) ^ (u64)(u32)pi[2];
    float u = (float)(splitmix64(key) >> 40) * (1.0f / 16777216.0f) * total;
    float before = threadIdx.x ? csum[threadIdx.x - 1] : 0.0f;
    if (mine > 0.0f && u >= before && (u < csum[threadIdx.x] || csum[threadIdx.x] >= total)) {
        float run = before; int last = -1;
        for (int i = beg; i < end; i++) {
            float p = __expf((row[i] - m) * inv_temp);
            if (p >= tf) { run += p; last = i; if (run > u) break; }
        }
        pick = last;                           // u can sit on a boundary: both owners write a valid pick
    }
    __syncthreads();
    if (threadIdx.x == 0) { out_ids[s] = pick; if (next_ids) next_ids[s] = pick; }
}
