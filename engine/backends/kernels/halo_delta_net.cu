// Qwen3.5's Gated DeltaNet and gated attention pieces (engine/model/delta_net.py is the float32 reference
// and the contract). Layouts, T tokens of S sequences, sequence s owning tokens qsl[s]..qsl[s+1]-1:
//   qkv      [T, C]            C = 2 Hk Dk + Hv Dv channels (q | k | v), the conv's input, then its output
//   conv     [slots, K-1, C]   each sequence's last K-1 conv inputs;  wconv [C, K]
//   state    [slots, Hv, Dk, Dv] the delta-rule matrix of every value head
//   ab       [T, 2 Hv]         beta logits | alpha (decay input) per value head
// A sequence whose first token this step is at position 0 starts from a zero conv and delta state.
// Value head h reads key head h % Hk (llama.cpp's tiled order).

// Causal depthwise conv + SiLU, in place on qkv, and the conv state rolled forward.
// grid (ceil(C / CONV_CHANNELS), S), block CONV_CHANNELS x CONV_SPANS: a thread per (channel, span of the sequence's
// tokens), so a prompt's tokens are walked CONV_SPANS at a time, not one by one (H100 run 16: the one-span form took
// ~39 us a layer at 128 tokens, 139 at 512, on 64 blocks). Every thread first reads the K - 1 inputs before its span
// (earlier tokens of qkv, or the stored state before the sequence's first token), and only after the block's barrier
// does any span overwrite qkv; the span holding the last token stores the state. A span's tokens are loaded
// CONV_BATCH at a time so their loads are in flight together (the in-place stores would otherwise serialize them).
#define CONV_CHANNELS 32
#define CONV_SPANS 8
#define CONV_BATCH 8
HALO_KERNEL void halo_conv_silu(float* qkv, float* conv, const float* wconv, const i32* qsl, const i32* slots,
                                const i32* positions, i32 C, i32 K) {
    GRID_DEPENDENCY_SYNC();
    int c = blockIdx.x * CONV_CHANNELS + threadIdx.x % CONV_CHANNELS, span = threadIdx.x / CONV_CHANNELS;
    int s = blockIdx.y, t0 = qsl[s], t1 = qsl[s + 1];
    int per = (t1 - t0 + CONV_SPANS - 1) / CONV_SPANS;
    int a = min(t0 + span * per, t1), b = min(a + per, t1);      // this span's tokens [a, b)
    bool live = c < C && t1 > t0;
    float* st = conv + (i64)slots[s] * (K - 1) * C;
    float win[7], w[7];                                      // K <= 8 (Qwen3.5: 4); registers (unrolled)
    float wlast = 0.0f;
    if (live) {
        bool fresh = positions[t0] == 0;
        wlast = wconv[(i64)c * K + K - 1];
        #pragma unroll
        for (int j = 0; j < 7; j++) {                        // win[j]: the input at token a - (K - 1) + j
            int u = a - (K - 1) + j;
            w[j] = j < K - 1 ? wconv[(i64)c * K + j] : 0.0f;
            win[j] = j >= K - 1 ? 0.0f : u >= t0 ? qkv[(i64)u * C + c]
                   : fresh ? 0.0f : st[(i64)(u - t0 + K - 1) * C + c];
        }
    }
    __syncthreads();                                         // every window read before any span writes qkv
    if (!live) return;
    for (int t = a; t < b; t += CONV_BATCH) {
        float x[CONV_BATCH];
        #pragma unroll
        for (int u = 0; u < CONV_BATCH; u++) x[u] = t + u < b ? qkv[(i64)(t + u) * C + c] : 0.0f;
        #pragma unroll
        for (int u = 0; u < CONV_BATCH; u++) {
            if (t + u >= b) break;
            float acc = x[u] * wlast;
            #pragma unroll
            for (int j = 0; j < 7; j++) if (j < K - 1) acc += win[j] * w[j];
            #pragma unroll
            for (int j = 0; j < 6; j++) if (j + 1 < K - 1) win[j] = win[j + 1];
            #pragma unroll
            for (int j = 0; j < 7; j++) if (j == K - 2) win[j] = x[u];
            qkv[(i64)(t + u) * C + c] = acc / (1.0f + __expf(-acc));
        }
    }
    if (b == t1 && a < b) {                                  // the last token's span: its window is the new state
        #pragma unroll
        for (int j = 0; j < 7; j++) if (j < K - 1) st[(i64)j * C + c] = win[j];
    }
}

// Before the delta rule, every token at once: q and k of each key head L2-normalised in place (q also
// scaled by 1/sqrt(Dk)), and ab's halves replaced by beta = sigmoid(b) and the log decay
// g = ssm_a * softplus(alpha + dt_bias). grid (T, Hk), block 128.
HALO_KERNEL void halo_delta_prep(float* qkv, float* ab, const float* ssm_a, const float* dt_bias, i32 Hk, i32 Hv,
                                 i32 Dk, i32 Dv, float eps) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32];
    int t = blockIdx.x, h = blockIdx.y;
    float* q = qkv + (i64)t * (2 * Hk * Dk + Hv * Dv) + h * Dk;
    float* k = q + Hk * Dk;
    float qq = 0.0f, kk = 0.0f;
    for (int i = threadIdx.x; i < Dk; i += blockDim.x) { qq += q[i] * q[i]; kk += k[i] * k[i]; }
    qq = block_sum(qq, red);
    kk = block_sum(kk, red);
    float qn = rsqrtf(qq + eps) * rsqrtf((float)Dk), kn = rsqrtf(kk + eps);
    for (int i = threadIdx.x; i < Dk; i += blockDim.x) { q[i] *= qn; k[i] *= kn; }
    if (h != 0) return;
    float* r = ab + (i64)t * 2 * Hv;
    for (int i = threadIdx.x; i < Hv; i += blockDim.x) {
        float x = r[Hv + i] + dt_bias[i];
        r[i] = 1.0f / (1.0f + __expf(-r[i]));
        r[Hv + i] = ssm_a[i] * (x > 20.0f ? x : log1pf(__expf(x)));     // softplus
    }
}

// The delta rule over each sequence's tokens in order (the recurrent form), after halo_delta_prep, for the
// sequences with fewer than chunked_min tokens this step (halo_delta_chunked takes the others).
// grid (Hv, ceil(Dv / DR_BLOCK_COLS), S), block DR_THREADS (engine.gpu.hybrid: RULE_COLUMNS, DELTA_THREADS):
// DR_WARPS warps, each owning DR_COLS state columns of head h. Lane (rg = lane / DR_COLS, c = lane % DR_COLS) holds
// rows 4 rg + 64 i + e (e < 4, i < DR_ROWS / 4, rows < Dk; so Dk <= 256) of its warp's column c in registers; the sums
// over Dk (k.S, then q.S) are each lane's rows followed by shuffles across the DR_GROUPS row groups, so the warps
// never wait for each other within a token. The block stages DR_CHUNK tokens' q, k (each row zero-padded to pad, a
// multiple of 64), v of its columns, beta and e^g in shared memory, loading the next chunk into registers while it
// walks this one: one barrier per chunk. Run 20 (H100, Qwen3.5-4B shapes, 24 layers of a 512-token step): 17.6 ms
// for the form before (a block meeting in shared memory three times a token), 11.9 with warps alone but each token's
// inputs loaded from global memory one token ahead, 6.9 as now. out [T, Hv Dv] gets o_t = S_t^T q_t.
#define DR_WARPS 8
#define DR_THREADS (32 * DR_WARPS)
#define DR_COLS 2
#define DR_BLOCK_COLS (DR_COLS * DR_WARPS)
#define DR_GROUPS (32 / DR_COLS)
#define DR_ROWS 16
#define DR_CHUNK 8
#define DR_MAX_PAD 256
#define DR_STAGE (DR_CHUNK * DR_MAX_PAD / DR_THREADS)   // q (and k) elements a thread stages per chunk
HALO_KERNEL void halo_delta_rule(const float* qkv, const float* ab, float* state, float* out, const i32* qsl,
                                 const i32* slots, const i32* positions, i32 Hk, i32 Hv, i32 Dk, i32 Dv,
                                 i32 chunked_min) {
    GRID_DEPENDENCY_SYNC();
    __shared__ __align__(16) float Qs[2][DR_CHUNK * DR_MAX_PAD], Ks[2][DR_CHUNK * DR_MAX_PAD];
    __shared__ float Vs[2][DR_CHUNK][DR_BLOCK_COLS], Bs[2][DR_CHUNK], Es[2][DR_CHUNK];
    int h = blockIdx.x, s = blockIdx.z, x = threadIdx.x, lane = x & 31, rg = lane / DR_COLS;
    int jb = blockIdx.y * DR_BLOCK_COLS, jl = DR_COLS * (x >> 5) + lane % DR_COLS, j = jb + jl, kh = h % Hk;
    int t0 = qsl[s], t1 = qsl[s + 1];
    if (t0 >= t1 || t1 - t0 >= chunked_min) return;         // the whole block: another kernel's sequence
    const i64 C = 2 * Hk * Dk + Hv * Dv, qo = kh * Dk, ko = Hk * Dk + kh * Dk, vo = 2 * Hk * Dk + h * Dv;
    const int pad = (Dk + 63) & ~63;                         // a token's staged row: <= DR_MAX_PAD
    bool live = j < Dv, walks = j - lane % DR_COLS < Dv, fresh = positions[t0] == 0;   // walks: the warp has a column
    float* S = state + ((i64)slots[s] * Hv + h) * Dk * Dv;
    float col[DR_ROWS];
    #pragma unroll
    for (int i = 0; i < DR_ROWS; i++) {
        int r = 4 * rg + 64 * (i >> 2) + (i & 3);
        col[i] = (r < Dk && live && !fresh) ? S[(i64)r * Dv + j] : 0.0f;
    }
    // staging: thread x loads elements x + DR_THREADS u of the chunk's [token][pad] q and k, one v of the block's
    // DR_BLOCK_COLS columns (x < DR_BLOCK_COLS DR_CHUNK), one beta and g (x < DR_CHUNK)
    float gq[DR_STAGE], gk[DR_STAGE], gv = 0.0f, gb = 0.0f, gg = 0.0f;
    auto fetch = [&](int c0) {
        int n = min(DR_CHUNK, t1 - c0);
        #pragma unroll
        for (int u = 0; u < DR_STAGE; u++) {
            int e = x + DR_THREADS * u, tk = e / pad, d = e - tk * pad;
            bool in = tk < n && d < Dk;
            gq[u] = in ? qkv[(c0 + tk) * C + qo + d] : 0.0f;
            gk[u] = in ? qkv[(c0 + tk) * C + ko + d] : 0.0f;
        }
        int tv = x / DR_BLOCK_COLS, jv = jb + x % DR_BLOCK_COLS;
        gv = (tv < n && jv < Dv) ? qkv[(c0 + tv) * C + vo + jv] : 0.0f;
        if (x < n) { gb = ab[(i64)(c0 + x) * 2 * Hv + h]; gg = ab[(i64)(c0 + x) * 2 * Hv + Hv + h]; }
    };
    auto stage = [&](int b) {
        #pragma unroll
        for (int u = 0; u < DR_STAGE; u++) {
            int e = x + DR_THREADS * u;
            if (e < DR_CHUNK * pad) { Qs[b][e] = gq[u]; Ks[b][e] = gk[u]; }
        }
        if (x < DR_BLOCK_COLS * DR_CHUNK) Vs[b][x / DR_BLOCK_COLS][x % DR_BLOCK_COLS] = gv;
        if (x < DR_CHUNK) { Bs[b][x] = gb; Es[b][x] = __expf(gg); }
    };
    fetch(t0);
    stage(0);
    __syncthreads();
    for (int c0 = t0, b = 0; c0 < t1; c0 += DR_CHUNK, b ^= 1) {
        int n = min(DR_CHUNK, t1 - c0);
        if (c0 + DR_CHUNK < t1) fetch(c0 + DR_CHUNK);        // in flight while this chunk is walked
        for (int tt = 0; tt < n && walks; tt++) {              // warps past Dv only stage
            const float4* q4 = (const float4*)(Qs[b] + tt * pad + 4 * rg);
            const float4* k4 = (const float4*)(Ks[b] + tt * pad + 4 * rg);
            float v = Vs[b][tt][jl], beta = Bs[b][tt], decay = Es[b][tt], mem = 0.0f;
            float q[DR_ROWS], k[DR_ROWS];
            #pragma unroll
            for (int i4 = 0; i4 < DR_ROWS / 4; i4++) {
                if (64 * i4 >= pad) break;
                float4 a = q4[16 * i4], kk = k4[16 * i4];
                q[4 * i4] = a.x; q[4 * i4 + 1] = a.y; q[4 * i4 + 2] = a.z; q[4 * i4 + 3] = a.w;
                k[4 * i4] = kk.x; k[4 * i4 + 1] = kk.y; k[4 * i4 + 2] = kk.z; k[4 * i4 + 3] = kk.w;
            }
            #pragma unroll
            for (int i = 0; i < DR_ROWS; i++)                // (decayed S)^T k over this lane's rows
                if (64 * (i >> 2) < pad) { col[i] *= decay; mem = fmaf(col[i], k[i], mem); }
            #pragma unroll
            for (int m = DR_COLS; m < 32; m <<= 1) mem += SHFL_XOR(mem, m);
            float delta = (v - mem) * beta, o = 0.0f;
            #pragma unroll
            for (int i = 0; i < DR_ROWS; i++)
                if (64 * (i >> 2) < pad) { col[i] = fmaf(k[i], delta, col[i]); o = fmaf(col[i], q[i], o); }
            #pragma unroll
            for (int m = DR_COLS; m < 32; m <<= 1) o += SHFL_XOR(o, m);
            if (rg == 0 && live) out[(i64)(c0 + tt) * Hv * Dv + h * Dv + j] = o;
        }
        if (c0 + DR_CHUNK < t1) stage(b ^ 1);                // its last readers finished before the last barrier
        __syncthreads();
    }
    #pragma unroll
    for (int i = 0; i < DR_ROWS; i++) {
        int r = 4 * rg + 64 * (i >> 2) + (i & 3);
        if (r < Dk && live) S[(i64)r * Dv + j] = col[i];
    }
}

// The chunked form of the same rule (engine.model.delta_net.delta_rule_chunked, the WY/UT representation), for
// sequences with >= chunked_min tokens this step; halo_delta_rule takes the others. Per chunk of n <= DC_CHUNK
// tokens, with G_i the log decay summed from the chunk start and A_ij = beta_i e^(G_i - G_j) k_i.k_j (j < i):
//   (I + A) v_new = beta (v - e^G (K S))                        forward substitution, 32 columns at once
//   o_i = e^(G_i) q_i.S + sum_(j <= i) e^(G_i - G_j) q_i.k_j v_new_j   (S before the chunk)
//   S <- e^(G_last) S + sum_i e^(G_last - G_i) k_i v_new_i^T
// Every exponent is <= 0 (G falls), so nothing overflows. grid (Hv, ceil(Dv / 32), S), block 256 (8 warps): a
// block owns 32 state columns of one head in shared memory (Dk <= 128); products over Dk run as one warp per
// pair (lanes over Dk) or one lane per column. DC_CHUNK 32 (the CPU reference uses 64; the same numbers
// within float32 rounding) keeps the shared memory under 48 KB (CUDA's static limit; RDNA has 64 KB).
// Opt-in (engine.gpu.hybrid.chunked_usable): as written it is slower than halo_delta_rule at 128-token prompts
// (one warp does the forward substitution; the pair products reduce across lanes, 5 shuffles each).
#define DC_CHUNK 32
#define DC_MAX_DK 128
HALO_KERNEL void halo_delta_chunked(const float* qkv, const float* ab, float* state, float* out, const i32* qsl,
                                    const i32* slots, const i32* positions, i32 Hk, i32 Hv, i32 Dk, i32 Dv,
                                    i32 chunked_min) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float Ss[DC_MAX_DK][32], Ks[DC_CHUNK][DC_MAX_DK], U[DC_CHUNK][32];
    __shared__ float A[DC_CHUNK][DC_CHUNK + 1], QK[DC_CHUNK][DC_CHUNK + 1];
    __shared__ float G[DC_CHUNK], B[DC_CHUNK], Eg[DC_CHUNK], El[DC_CHUNK];
    int h = blockIdx.x, s = blockIdx.z, lane = threadIdx.x & 31, w = threadIdx.x >> 5, x = threadIdx.x;
    int nw = blockDim.x >> 5, j = blockIdx.y * 32 + lane, kh = h % Hk;
    i64 C = 2 * Hk * Dk + Hv * Dv;
    int t0 = qsl[s], t1 = qsl[s + 1];
    if (t1 - t0 < chunked_min) return;
    bool live = j < Dv, fresh = positions[t0] == 0;
    float* S = state + ((i64)slots[s] * Hv + h) * Dk * Dv;
    for (int d = w; d < Dk; d += nw) Ss[d][lane] = (live && !fresh) ? S[(i64)d * Dv + j] : 0.0f;
    const i64 qoff = kh * Dk, koff = Hk * Dk + kh * Dk, voff = 2 * Hk * Dk + h * Dv + j;
    for (int c0 = t0; c0 < t1; c0 += DC_CHUNK) {
        int n = min(DC_CHUNK, t1 - c0);
        __syncthreads();                                     // the last chunk's reads are done, Ss is set
        for (int e = x; e < n * Dk; e += blockDim.x) Ks[e / Dk][e % Dk] = qkv[(c0 + e / Dk) * C + koff + e % Dk];
        if (x < n) { B[x] = ab[(i64)(c0 + x) * 2 * Hv + h]; G[x] = ab[(i64)(c0 + x) * 2 * Hv + Hv + h]; }
        __syncthreads();
        if (x == 0) for (int i = 1; i < n; i++) G[i] += G[i - 1];
        __syncthreads();
        if (x < n) { Eg[x] = __expf(G[x]); El[x] = __expf(G[n - 1] - G[x]); }
        for (int p = w; p < n * n; p += nw) {                // A: one warp per pair j < i
            int i = p / n, jj = p % n;
            if (jj >= i) continue;
            float acc = 0.0f;
            for (int d = lane; d < Dk; d += 32) acc += Ks[i][d] * Ks[jj][d];
            acc = warp_sum(acc);
            if (lane == 0) A[i][jj] = B[i] * __expf(G[i] - G[jj]) * acc;
        }
        __syncthreads();
        for (int i = w; i < n; i += nw) {                    // right-hand side, lane = column
            float p = 0.0f;
            for (int d = 0; d < Dk; d++) p += Ks[i][d] * Ss[d][lane];
            float v = live ? qkv[(c0 + i) * C + voff] : 0.0f;
            U[i][lane] = B[i] * (v - Eg[i] * p);
        }
        __syncthreads();
        if (w == 0) {                                        // forward substitution, in place in U
            for (int i = 1; i < n; i++) {
                float acc = U[i][lane];
                for (int jj = 0; jj < i; jj++) acc -= A[i][jj] * U[jj][lane];
                U[i][lane] = acc;
            }
        } else {                                             // meanwhile QK: one warp per pair j <= i
            for (int p = w - 1; p < n * n; p += nw - 1) {
                int i = p / n, jj = p % n;
                if (jj > i) continue;
                const float* q = qkv + (c0 + i) * C + qoff;
                float acc = 0.0f;
                for (int d = lane; d < Dk; d += 32) acc += q[d] * Ks[jj][d];
                acc = warp_sum(acc);
                if (lane == 0) QK[i][jj] = __expf(G[i] - G[jj]) * acc;
            }
        }
        __syncthreads();
        for (int i = w; i < n; i += nw) {                    // outputs, from the chunk's starting state
            const float* q = qkv + (c0 + i) * C + qoff;
            float p = 0.0f;
            for (int d = 0; d < Dk; d++) p += q[d] * Ss[d][lane];
            float o = Eg[i] * p;
            for (int jj = 0; jj <= i; jj++) o += QK[i][jj] * U[jj][lane];
            if (live) out[(i64)(c0 + i) * Hv * Dv + h * Dv + j] = o;
        }
        __syncthreads();                                     // every read of the starting state is done
        float last = Eg[n - 1];
        for (int d = w; d < Dk; d += nw) {
            float acc = last * Ss[d][lane];
            for (int i = 0; i < n; i++) acc += El[i] * Ks[i][d] * U[i][lane];
            Ss[d][lane] = acc;
        }
    }
    __syncthreads();
    if (live) for (int d = w; d < Dk; d += nw) S[(i64)d * Dv + j] = Ss[d][lane];
}

// Gated RMSNorm per value head, in place: o = o / rms(o) * w * silu(z). grid (Hv, T), block Dv rounded up
// to a multiple of 32.
HALO_KERNEL void halo_gated_norm(float* o, const float* z, const float* w, i32 Hv, i32 Dv, float eps) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32];
    int h = blockIdx.x, t = blockIdx.y, j = threadIdx.x;
    i64 at = (i64)t * Hv * Dv + h * Dv + j;
    float x = j < Dv ? o[at] : 0.0f;
    float ss = block_sum(x * x, red);
    if (j >= Dv) return;
    float g = z[at];
    o[at] = x * rsqrtf(ss / Dv + eps) * w[j] * (g / (1.0f + __expf(-g)));
}

// Attention output gate, in place: attn[t, h*D + d] *= sigmoid(qg[t, h*2D + D + d]) (qg: attn_q's output,
// per head [q_h | gate_h]). grid ceil(T H D / 256), block 256.
HALO_KERNEL void halo_output_gate(float* attn, const float* qg, i32 T, i32 H, i32 D) {
    GRID_DEPENDENCY_SYNC();
    i64 i = HALO_GLOBAL_ID;
    if (i >= (i64)T * H * D) return;
    i64 t = i / ((i64)H * D), r = i % ((i64)H * D), h = r / D, d = r % D;
    float g = qg[t * 2 * H * D + h * 2 * D + D + d];
    attn[i] *= 1.0f / (1.0f + __expf(-g));
}

// Gated attention's query, out of attn_q's per-head [q_h | gate_h] rows: q[t, ldq-strided, h*D + d] =
// qg[t, h*2D + d] (the gate half stays in qg for halo_output_gate). grid ceil(T H D / 256), block 256.
HALO_KERNEL void halo_split_q_gate(float* q, i32 ldq, const float* qg, i32 T, i32 H, i32 D) {
    GRID_DEPENDENCY_SYNC();
    i64 i = HALO_GLOBAL_ID;
    if (i >= (i64)T * H * D) return;
    i64 t = i / ((i64)H * D), r = i % ((i64)H * D), h = r / D, d = r % D;
    q[t * ldq + r] = qg[t * 2 * H * D + h * 2 * D + d];
}
