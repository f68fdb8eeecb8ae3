// Qwen3.5's Gated DeltaNet and gated attention pieces (engine/model/delta_net.py is the float32 reference
// and the contract). Layouts, T tokens of S sequences, sequence s owning tokens qsl[s]..qsl[s+1]-1:
//   qkv      [T, C]            C = 2 Hk Dk + Hv Dv channels (q | k | v), the conv's input, then its output
//   conv     [slots, K-1, C]   each sequence's last K-1 conv inputs;  wconv [C, K]
//   state    [slots, Hv, Dk, Dv] the delta-rule matrix of every value head
//   ab       [T, 2 Hv]         beta logits | alpha (decay input) per value head
// A sequence whose first token this step is at position 0 starts from a zero conv and delta state.
// Value head h reads key head h % Hk (llama.cpp's tiled order).

// Causal depthwise conv + SiLU, in place on qkv, and the conv state rolled forward.
// grid (ceil(C / 128), S), block 128: one thread per (channel, sequence), tokens in order.
HALO_KERNEL void halo_conv_silu(float* qkv, float* conv, const float* wconv, const i32* qsl, const i32* slots,
                                const i32* positions, i32 C, i32 K) {
    int c = blockIdx.x * blockDim.x + threadIdx.x, s = blockIdx.y;
    if (c >= C) return;
    int t0 = qsl[s], t1 = qsl[s + 1];
    float* st = conv + (i64)slots[s] * (K - 1) * C;
    float win[8];                                            // K <= 8 (Qwen3.5: 4)
    bool fresh = positions[t0] == 0;
    for (int j = 0; j < K - 1; j++) win[j] = fresh ? 0.0f : st[(i64)j * C + c];
    for (int t = t0; t < t1; t++) {
        float x = qkv[(i64)t * C + c];
        float acc = x * wconv[(i64)c * K + K - 1];
        for (int j = 0; j < K - 1; j++) acc += win[j] * wconv[(i64)c * K + j];
        for (int j = 0; j + 1 < K - 1; j++) win[j] = win[j + 1];
        if (K > 1) win[K - 2] = x;
        qkv[(i64)t * C + c] = acc / (1.0f + __expf(-acc));
    }
    for (int j = 0; j < K - 1; j++) st[(i64)j * C + c] = win[j];
}

// The delta rule over each sequence's tokens in order (the recurrent form), q/k L2-normalised here.
// grid (Hv, S), block Dv rounded up to a multiple of 32 threads (Dv <= 256): thread j < Dv holds column j of
// the head's Dk x Dv state in registers (Dk <= 256); the rest only join the reductions. out [T, Hv Dv] gets
// o_t = S_t^T q_t.
HALO_KERNEL void halo_delta_rule(const float* qkv, const float* ab, float* state, float* out, const float* ssm_a,
                                 const float* dt_bias, const i32* qsl, const i32* slots, const i32* positions,
                                 i32 Hk, i32 Hv, i32 Dk, i32 Dv, float eps) {
    __shared__ float q[256], k[256], red[32];
    int h = blockIdx.x, s = blockIdx.y, j = threadIdx.x, kh = h % Hk, C = 2 * Hk * Dk + Hv * Dv;
    int t0 = qsl[s], t1 = qsl[s + 1];
    float* S = state + ((i64)slots[s] * Hv + h) * Dk * Dv;
    float col[256];
    bool fresh = positions[t0] == 0, live = j < Dv;
    for (int i = 0; i < Dk; i++) col[i] = (fresh || !live) ? 0.0f : S[(i64)i * Dv + j];
    float qscale = rsqrtf((float)Dk);
    for (int t = t0; t < t1; t++) {
        const float* row = qkv + (i64)t * C;
        float qq = 0.0f, kk = 0.0f;
        for (int i = j; i < Dk; i += blockDim.x) {
            float a = row[kh * Dk + i], b = row[Hk * Dk + kh * Dk + i];
            q[i] = a; k[i] = b; qq += a * a; kk += b * b;
        }
        qq = block_sum(qq, red);
        kk = block_sum(kk, red);
        float qn = rsqrtf(qq + eps) * qscale, kn = rsqrtf(kk + eps);
        float v = live ? row[2 * Hk * Dk + h * Dv + j] : 0.0f;
        float beta = 1.0f / (1.0f + __expf(-ab[(i64)t * 2 * Hv + h]));
        float x = ab[(i64)t * 2 * Hv + Hv + h] + dt_bias[h];
        float sp = x > 20.0f ? x : log1pf(__expf(x));          // softplus
        float decay = __expf(ssm_a[h] * sp);
        float mem = 0.0f;
        for (int i = 0; i < Dk; i++) { col[i] *= decay; mem += col[i] * k[i]; }
        float delta = (v - mem * kn) * beta;
        float o = 0.0f;
        for (int i = 0; i < Dk; i++) { col[i] += k[i] * kn * delta; o += col[i] * q[i]; }
        if (live) out[(i64)t * Hv * Dv + h * Dv + j] = o * qn;
        __syncthreads();                                     // q/k of this token read by every thread
    }
    if (live)
        for (int i = 0; i < Dk; i++) S[(i64)i * Dv + j] = col[i];
}

// Gated RMSNorm per value head, in place: o = o / rms(o) * w * silu(z). grid (Hv, T), block Dv rounded up
// to a multiple of 32.
HALO_KERNEL void halo_gated_norm(float* o, const float* z, const float* w, i32 Hv, i32 Dv, float eps) {
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
    i64 i = HALO_GLOBAL_ID;
    if (i >= (i64)T * H * D) return;
    i64 t = i / ((i64)H * D), r = i % ((i64)H * D), h = r / D, d = r % D;
    float g = qg[t * 2 * H * D + h * 2 * D + D + d];
    attn[i] *= 1.0f / (1.0f + __expf(-g));
}

// Gated attention's query, out of attn_q's per-head [q_h | gate_h] rows: q[t, ldq-strided, h*D + d] =
// qg[t, h*2D + d] (the gate half stays in qg for halo_output_gate). grid ceil(T H D / 256), block 256.
HALO_KERNEL void halo_split_q_gate(float* q, i32 ldq, const float* qg, i32 T, i32 H, i32 D) {
    i64 i = HALO_GLOBAL_ID;
    if (i >= (i64)T * H * D) return;
    i64 t = i / ((i64)H * D), r = i % ((i64)H * D), h = r / D, d = r % D;
    q[t * ldq + r] = qg[t * 2 * H * D + h * 2 * D + d];
}
