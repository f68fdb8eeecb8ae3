// Per-layer glue of the forward pass: q/k norm + rotary + KV-cache write, paged attention, residual + RMS norm.
// Float32 throughout. Step metadata (positions, slots, token -> sequence, seq_lens, block tables) is read
// from device memory, so a captured graph replays any step of the same token count.




// qkv [T, ld] holds q (H heads) | k (Hkv) | v (Hkv), each head D wide. For every token t and head:
// optional per-head RMS norm (q_norm / k_norm), rotary on the first rope_dim dims (neox: pairs (i, i + r/2);
// normal: (2i, 2i + 1)), angles = pos * inv_freq[i] in double. q is rotated in place; k (rotated) and v are
// written to the cache slot slot_mapping[t]. Grid: (T, H + Hkv); block: D threads rounded up to 32.
HALO_KERNEL void halo_rope_kv(float* qkv, i32 ld, const i32* positions, const i32* slots, const float* q_norm,
                              const float* k_norm, float eps, i32 H, i32 Hkv, i32 D, i32 rope_dim, i32 neox,
                              const double* inv_freq, float* kcache, float* vcache) {
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
        float c = (float)cos(ang), s = (float)sin(ang);
        float a = first ? v : buf[partner], b = first ? buf[partner] : v;
        out = first ? a * c - b * s : b * c + a * s;
    }
    if (d >= D) return;
    if (is_q) { src[d] = out; return; }
    int hk = head - H;
    size_t slot = (size_t)slots[t];
    src[d] = out;
    kcache[(slot * Hkv + hk) * D + d] = out;
    vcache[(slot * Hkv + hk) * D + d] = src[(size_t)Hkv * D + d];   // v head hk sits Hkv heads after k head hk
}

// out[t, h*D:(h+1)*D] = softmax(scale * q . K^T + mask) V over the sequence's cached keys, read through its
// block table. Keys allowed: j <= pos (causal), and j > pos - window when window > 0 (sliding).
// Grid: (T, H); block: 32 * NW threads; each warp walks keys j = lo + warp, lo + warp + NW, ... with an
// online softmax; warps merge through shared memory (dynamic: NW * (D + 2) floats).
#define ATT_MAX_PER_LANE 8      // D <= 256
HALO_KERNEL void halo_attention(const float* qkv, i32 ld, const float* kcache, const float* vcache,
                                const i32* positions, const i32* token_seq, const i32* block_tables, i32 bt_width,
                                i32 bs, i32 H, i32 Hkv, i32 D, float scale, i32 window, float* out) {
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
        size_t slot = (size_t)table[j / bs] * bs + (j % bs);
        const float* kr = kcache + (slot * Hkv + hk) * D;
        const float* vr = vcache + (slot * Hkv + hk) * D;
        float p = 0.0f;
        #pragma unroll
        for (int i = 0; i < ATT_MAX_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) p += qr[i] * kr[d];
        }
        float sc = warp_sum(p);
        float mn = fmaxf(m, sc);
        float corr = __expf(m - mn), e = __expf(sc - mn);
        l = l * corr + e;
        #pragma unroll
        for (int i = 0; i < ATT_MAX_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) acc[i] = acc[i] * corr + e * vr[d];
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
    float M = NEG_INF;
    for (int w = 0; w < nw; w++) M = fmaxf(M, sm[(size_t)w * (D + 2) + D]);
    float L = 0.0f;
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

// Split-KV (flash-decoding) attention for steps of few tokens at any depth: the keys of token t's sequence are
// cut into chunks of `chunk` positions; block (t, kv head hk, chunk c) walks its chunk once for all G = H / Hkv
// query heads of that kv head (each K/V row is read once per group, not once per head). Warps take keys
// j = j0 + warp, j0 + warp + SKV_WARPS, ... with an online softmax per head; the block merges its warps and
// writes, per (t, h, c), the unnormalised partial part[((t * H + h) * nc + c) * (D + 2)] = acc[D] | m | l
// (a chunk with no allowed key writes m = -inf, l = 0). halo_attention_merge combines the chunks.
// Limits (the caller checks): D <= 32 * SKV_PER_LANE, G <= SKV_MAX_GROUP. Shared: SKV_WARPS * G * (D + 2) floats.
#define SKV_WARPS 4
#define SKV_MAX_GROUP 8
#define SKV_PER_LANE 4          // D <= 128
HALO_KERNEL void halo_attention_split(const float* qkv, i32 ld, const float* kcache, const float* vcache,
                                      const i32* positions, const i32* token_seq, const i32* block_tables,
                                      i32 bt_width, i32 bs, i32 H, i32 Hkv, i32 D, float scale, i32 window,
                                      i32 chunk, float* part) {
    extern __shared__ float sm[];
    int t = blockIdx.x, hk = blockIdx.y, c = blockIdx.z, nc = gridDim.z;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int G = H / Hkv;
    int pos = positions[t], s = token_seq[t];
    int lo = window > 0 ? max(0, pos - window + 1) : 0;
    int j0 = max(lo, c * chunk), j1 = min(pos + 1, (c + 1) * chunk);
    const i32* table = block_tables + (size_t)s * bt_width;
    float qr[SKV_MAX_GROUP][SKV_PER_LANE], acc[SKV_MAX_GROUP][SKV_PER_LANE], m[SKV_MAX_GROUP], l[SKV_MAX_GROUP];
    #pragma unroll
    for (int g = 0; g < SKV_MAX_GROUP; g++) {
        const float* q = qkv + (size_t)t * ld + (size_t)(hk * G + g) * D;
        m[g] = NEG_INF;
        l[g] = 0.0f;
        #pragma unroll
        for (int i = 0; i < SKV_PER_LANE; i++) {
            int d = lane + 32 * i;
            qr[g][i] = (g < G && d < D) ? q[d] * scale : 0.0f;
            acc[g][i] = 0.0f;
        }
    }
    for (int j = j0 + warp; j < j1; j += SKV_WARPS) {
        size_t slot = (size_t)table[j / bs] * bs + (j % bs);
        const float* kr = kcache + (slot * Hkv + hk) * D;
        const float* vr = vcache + (slot * Hkv + hk) * D;
        float kv_k[SKV_PER_LANE], kv_v[SKV_PER_LANE];
        #pragma unroll
        for (int i = 0; i < SKV_PER_LANE; i++) {
            int d = lane + 32 * i;
            kv_k[i] = d < D ? kr[d] : 0.0f;
            kv_v[i] = d < D ? vr[d] : 0.0f;
        }
        #pragma unroll
        for (int g = 0; g < SKV_MAX_GROUP; g++) {
            if (g >= G) break;
            float p = 0.0f;
            #pragma unroll
            for (int i = 0; i < SKV_PER_LANE; i++) p += qr[g][i] * kv_k[i];
            float sc = warp_sum(p);
            float mn = fmaxf(m[g], sc);
            float corr = __expf(m[g] - mn), e = __expf(sc - mn);
            l[g] = l[g] * corr + e;
            #pragma unroll
            for (int i = 0; i < SKV_PER_LANE; i++) acc[g][i] = acc[g][i] * corr + e * kv_v[i];
            m[g] = mn;
        }
    }
    int W = D + 2;
    #pragma unroll
    for (int g = 0; g < SKV_MAX_GROUP; g++) {
        if (g >= G) break;
        float* wa = sm + (size_t)(warp * G + g) * W;
        #pragma unroll
        for (int i = 0; i < SKV_PER_LANE; i++) {
            int d = lane + 32 * i;
            if (d < D) wa[d] = acc[g][i];
        }
        if (lane == 0) { wa[D] = m[g]; wa[D + 1] = l[g]; }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < G * W; k += blockDim.x) {     // k = g * W + (d | D: m | D + 1: l)
        int g = k / W, d = k - g * W;
        float M = NEG_INF;
        for (int w = 0; w < SKV_WARPS; w++) M = fmaxf(M, sm[(size_t)(w * G + g) * W + D]);
        float v = 0.0f;
        if (d == D) v = M;
        else if (M != NEG_INF) {
            for (int w = 0; w < SKV_WARPS; w++) {
                const float* wa = sm + (size_t)(w * G + g) * W;
                if (wa[D] != NEG_INF) v += wa[d] * __expf(wa[D] - M);
            }
        }
        int h = hk * G + g;
        part[((size_t)(t * H + h) * nc + c) * W + d] = v;
    }
}

// out[t, h*D:(h+1)*D] from halo_attention_split's nc partials of (t, h). Grid: (T, H); block: >= 32 threads.
HALO_KERNEL void halo_attention_merge(const float* part, i32 nc, i32 H, i32 D, float* out) {
    int t = blockIdx.x, h = blockIdx.y, W = D + 2;
    const float* p = part + (size_t)(t * H + h) * nc * W;
    float M = NEG_INF;
    for (int c = 0; c < nc; c++) M = fmaxf(M, p[(size_t)c * W + D]);
    float L = 0.0f;
    for (int c = 0; c < nc; c++) {
        float mc = p[(size_t)c * W + D];
        if (mc != NEG_INF) L += p[(size_t)c * W + D + 1] * __expf(mc - M);
    }
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float o = 0.0f;
        for (int c = 0; c < nc; c++) {
            float mc = p[(size_t)c * W + D];
            if (mc != NEG_INF) o += p[(size_t)c * W + d] * __expf(mc - M);
        }
        out[(size_t)t * H * D + (size_t)h * D + d] = o / L;
    }
}

// Residual and the next norm in one pass over a token's row (grid: T blocks):
//   if o:  x += post_w ? rmsnorm(o) * post_w : o
//   h = rmsnorm(x) * next_w
HALO_KERNEL void halo_add_norm(float* x, const float* o, const float* post_w, const float* next_w, float eps,
                               i32 E, float* h) {
    __shared__ float red[32];
    int t = blockIdx.x;
    float* xr = x + (size_t)t * E;
    if (o) {
        const float* orow = o + (size_t)t * E;
        float inv = 1.0f;
        if (post_w) {
            float ss = 0.0f;
            for (int i = threadIdx.x; i < E; i += blockDim.x) ss += orow[i] * orow[i];
            inv = 1.0f / sqrtf(block_sum(ss, red) / (float)E + eps);
        }
        for (int i = threadIdx.x; i < E; i += blockDim.x)
            xr[i] += post_w ? orow[i] * inv * post_w[i] : orow[i];
        __syncthreads();
    }
    float ss = 0.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) ss += xr[i] * xr[i];
    float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)E + eps);
    for (int i = threadIdx.x; i < E; i += blockDim.x) h[(size_t)t * E + i] = xr[i] * inv * next_w[i];
}
