// Quantized weights, dequantized on the fly: matrix x activations products, SwiGLU/GeGLU, embedding rows.
// Weights keep GGUF's layout: row r of a [rows, K] matrix is K / block_elems blocks of block_bytes bytes.
// Activations are float32 row-major [T, K] (ld = K); K is a multiple of 8 (checked on the host).
// One warp per weight row (R rows per warp for many tokens); each lane decodes groups of 8 consecutive
// elements (`dq8`) and multiplies them into NT tokens' accumulators; a warp shuffle reduces at the end.

// ggml type ids (engine.gguf.types.GGMLType)

#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_BF16 30
#define T_MXFP4 39

__device__ __forceinline__ unsigned int ld_u8(const unsigned char* p) { return (unsigned int)__ldg(p); }
__device__ __forceinline__ unsigned int ld_u16(const unsigned char* p) { return ld_u8(p) | (ld_u8(p + 1) << 8); }
__device__ __forceinline__ unsigned int ld_u32(const unsigned char* p) { return ld_u16(p) | (ld_u16(p + 2) << 16); }

// get_scale_min_k4: 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes at q
__device__ __forceinline__ void scale_min_k4(int j, const unsigned char* q, float* sc, float* mn) {
    unsigned int s, m;
    if (j < 4) { s = ld_u8(q + j) & 63u; m = ld_u8(q + j + 4) & 63u; }
    else {
        s = (ld_u8(q + j + 4) & 15u) | ((ld_u8(q + j - 4) >> 6) << 4);
        m = (ld_u8(q + j + 4) >> 4) | ((ld_u8(q + j) >> 6) << 4);
    }
    *sc = (float)s; *mn = (float)m;
}

// MXFP4 (engine.gguf.dequant): ggml keeps the e2m1 values doubled, so they are the integers 0, 1, 2, 3, 4, 6, 8,
// 12 (bit 3: sign; magnitudes packed one per nibble below), and halves the e8m0 scale instead: 2^(e - 128),
// whose float32 bits are (e - 1) << 23, or the subnormal 0x00200000 << e for e < 2.
__device__ __forceinline__ float e2m1_doubled(unsigned int code) {
    float mag = (float)((0xC8643210u >> (4u * (code & 7u))) & 15u);
    return code & 8u ? -mag : mag;
}

__device__ __forceinline__ float e8m0_half(unsigned int e) {
    return __int_as_float((int)(e < 2u ? 0x00200000u << e : (e - 1u) << 23));
}

// Elements 8g .. 8g+7 of the row starting at `row` (type TYPE) into w[0..7].
template <int TYPE>
__device__ __forceinline__ void dq8(const unsigned char* row, int g, float* w) {
    if (TYPE == T_F32) {
        const float4* p = (const float4*)(row + (size_t)g * 32);
        float4 a = __ldg(p), b = __ldg(p + 1);
        w[0] = a.x; w[1] = a.y; w[2] = a.z; w[3] = a.w; w[4] = b.x; w[5] = b.y; w[6] = b.z; w[7] = b.w;
    } else if (TYPE == T_F16 || TYPE == T_BF16) {
        const unsigned char* p = row + (size_t)g * 16;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            unsigned int h = ld_u16(p + 2 * i);
            w[i] = TYPE == T_F16 ? half_to_float(h) : __int_as_float((int)(h << 16));
        }
    } else if (TYPE == T_Q4_0 || TYPE == T_Q4_1) {
        const int bb = TYPE == T_Q4_0 ? 18 : 20, qo = TYPE == T_Q4_0 ? 2 : 4;
        const unsigned char* b = row + (size_t)(g >> 2) * bb;
        int sub = g & 3;                                   // 0,1: low nibbles of qs[0..7], qs[8..15]; 2,3: high
        float d = half_to_float(ld_u16(b)), m = TYPE == T_Q4_1 ? half_to_float(ld_u16(b + 2)) : 0.0f;
        const unsigned char* q = b + qo + (sub & 1) * 8;
        int sh = (sub >> 1) * 4;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int v = (int)((ld_u8(q + i) >> sh) & 15u);
            w[i] = TYPE == T_Q4_0 ? (float)(v - 8) * d : (float)v * d + m;
        }
    } else if (TYPE == T_Q5_0 || TYPE == T_Q5_1) {
        const int bb = TYPE == T_Q5_0 ? 22 : 24, ho = TYPE == T_Q5_0 ? 2 : 4, qo = ho + 4;
        const unsigned char* b = row + (size_t)(g >> 2) * bb;
        int sub = g & 3;
        float d = half_to_float(ld_u16(b)), m = TYPE == T_Q5_1 ? half_to_float(ld_u16(b + 2)) : 0.0f;
        unsigned int qh = ld_u32(b + ho);
        const unsigned char* q = b + qo + (sub & 1) * 8;
        int sh = (sub >> 1) * 4;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int j = sub * 8 + i;                           // element index in the block: qh bit j
            int v = (int)(((ld_u8(q + i) >> sh) & 15u) | (((qh >> j) & 1u) << 4));
            w[i] = TYPE == T_Q5_0 ? (float)(v - 16) * d : (float)v * d + m;
        }
    } else if (TYPE == T_MXFP4) {
        // 17-byte blocks: e8m0 exponent, then 16 bytes of e2m1 codes laid out like Q4_0's nibbles
        const unsigned char* b = row + (size_t)(g >> 2) * 17;
        float d = e8m0_half(ld_u8(b));
        int sub = g & 3;
        const unsigned char* q = b + 1 + (sub & 1) * 8;
        int sh = (sub >> 1) * 4;
        #pragma unroll
        for (int i = 0; i < 8; i++) w[i] = e2m1_doubled((ld_u8(q + i) >> sh) & 15u) * d;
    } else if (TYPE == T_Q8_0) {
        const unsigned char* b = row + (size_t)(g >> 2) * 34;
        float d = half_to_float(ld_u16(b));
        const unsigned char* q = b + 2 + (g & 3) * 8;
        #pragma unroll
        for (int i = 0; i < 8; i++) w[i] = (float)(signed char)ld_u8(q + i) * d;
    } else if (TYPE == T_Q4_K || TYPE == T_Q5_K) {
        const int bb = TYPE == T_Q4_K ? 144 : 176, qo = TYPE == T_Q4_K ? 16 : 48;
        const unsigned char* b = row + (size_t)(g >> 5) * bb;
        int e = (g & 31) * 8;                              // element in the super-block
        int c = e >> 6, h = (e >> 5) & 1, l = e & 31, j = e >> 5;
        float d = half_to_float(ld_u16(b)), dmin = half_to_float(ld_u16(b + 2)), sc, mn;
        scale_min_k4(j, b + 4, &sc, &mn);
        float dl = d * sc, ml = dmin * mn;
        const unsigned char* q = b + qo + 32 * c + l;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            unsigned int v = (ld_u8(q + i) >> (4 * h)) & 15u;
            if (TYPE == T_Q5_K) v |= ((ld_u8(b + 16 + l + i) >> j) & 1u) << 4;
            w[i] = dl * (float)v - ml;
        }
    } else if (TYPE == T_Q6_K) {
        const unsigned char* b = row + (size_t)(g >> 5) * 210;
        int e = (g & 31) * 8;
        int h = e >> 7, r = e & 127, k = r >> 5, l = r & 31;
        float dl = half_to_float(ld_u16(b + 208)) * (float)(signed char)ld_u8(b + 192 + (e >> 4));
        const unsigned char* ql = b + 64 * h + 32 * (k & 1) + l;
        const unsigned char* qh = b + 128 + 32 * h + l;
        int sl = 4 * (k >> 1), shh = 2 * k;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int v = (int)(((ld_u8(ql + i) >> sl) & 15u) | (((ld_u8(qh + i) >> shh) & 3u) << 4)) - 32;
            w[i] = dl * (float)v;
        }
    }
}


// acc[r][t] = sum_k W[row r][k] * X[xrow(t0 + t)][k], partial per lane (reduced by the caller).
template <int TYPE, int R, int NT>
__device__ __forceinline__ void rows_dot(const unsigned char* const* rows, int K, const float* X,
                                         const i32* xrow, int t0, int T, float (*acc)[NT]) {
    int lane = threadIdx.x & 31;
    const float* xr[NT];
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        int tt = t0 + t < T ? t0 + t : T - 1;              // clamp: duplicate reads, results discarded
        xr[t] = X + (size_t)(xrow ? xrow[tt] : tt) * K;
    }
    for (int g = lane; g < (K >> 3); g += 32) {
        float w[R][8];
        #pragma unroll
        for (int r = 0; r < R; r++) dq8<TYPE>(rows[r], g, w[r]);
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4* xp = (const float4*)(xr[t] + 8 * g);
            float4 a = xp[0], b = xp[1];
            #pragma unroll
            for (int r = 0; r < R; r++)
                acc[r][t] += w[r][0] * a.x + w[r][1] * a.y + w[r][2] * a.z + w[r][3] * a.w
                           + w[r][4] * b.x + w[r][5] * b.y + w[r][6] * b.z + w[r][7] * b.w;
        }
    }
}

template <int R, int NT>
__device__ __forceinline__ void rows_dot_any(int type, const unsigned char* const* rows, int K, const float* X,
                                             const i32* xrow, int t0, int T, float (*acc)[NT]) {
    switch (type) {
        case T_F32: rows_dot<T_F32, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_F16: rows_dot<T_F16, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_BF16: rows_dot<T_BF16, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q4_0: rows_dot<T_Q4_0, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q4_1: rows_dot<T_Q4_1, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q5_0: rows_dot<T_Q5_0, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q5_1: rows_dot<T_Q5_1, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q8_0: rows_dot<T_Q8_0, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q4_K: rows_dot<T_Q4_K, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q5_K: rows_dot<T_Q5_K, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_Q6_K: rows_dot<T_Q6_K, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        case T_MXFP4: rows_dot<T_MXFP4, R, NT>(rows, K, X, xrow, t0, T, acc); break;
        default: break;
    }
}

// Y[t, r] (+ bias[r]) for rows r of up to three stacked matrices (q|k|v): segment s has n_s rows of type
// t_s with row stride rb_s bytes. Grid: (ceil(rows / (warps * R)), ceil(T / NT)); block: warps * 32.
template <int R, int NT>
__device__ void matmul_seg(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                           const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                           const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                           const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                           float* Y, i32 ldy) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row0 = (blockIdx.x * (blockDim.x >> 5) + warp) * R;
    int rows = n0 + n1 + n2;
    if (row0 >= rows) return;
    int tok0 = blockIdx.y * NT;
    // a warp's R rows lie in one segment (segment sizes are multiples of R: checked on the host)
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rp[R];
    #pragma unroll
    for (int r = 0; r < R; r++) rp[r] = base + (size_t)(local + r) * rb;
    float acc[R][NT];
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    rows_dot_any<R, NT>(type, rp, K, X, xrow, tok0, T, acc);
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            float v = warp_sum(acc[r][t]);
            if (lane == 0 && tok0 + t < T) Y[(size_t)(tok0 + t) * ldy + row0 + r] = v + (bias ? bias[row0 + r] : 0.0f);
        }
}

#define MATMUL_ENTRY(NAME, R, NT)                                                                         \
HALO_KERNEL void NAME(const unsigned char* w0, i32 t0, i32 n0, i32 rb0, const unsigned char* w1, i32 t1,    \
                      i32 n1, i32 rb1, const unsigned char* w2, i32 t2, i32 n2, i32 rb2, const float* bias, \
                      const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy) {                  \
    GRID_DEPENDENCY_SYNC();                                                                                \
    matmul_seg<R, NT>(w0, t0, n0, rb0, w1, t1, n1, rb1, w2, t2, n2, rb2, bias, X, xrow, K, T, Y, ldy);      \
}
MATMUL_ENTRY(halo_matmul_r1_t1, 1, 1)
MATMUL_ENTRY(halo_matmul_r1_t4, 1, 4)
MATMUL_ENTRY(halo_matmul_r4_t8, 4, 8)

__device__ __forceinline__ float act_fn(float g, int act) {
    if (act == 0) return g * (0.5f + 0.5f * tanhf(0.5f * g));                                  // silu
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));      // gelu tanh
}

// A[t, r] = act(gate[r] . X[t]) * (up[r] . X[t]) for r < n_ff. Same grid/block scheme as the matmul.
template <int R, int NT>
__device__ void glu(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                    i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row0 = (blockIdx.x * (blockDim.x >> 5) + warp) * R;
    if (row0 >= n_ff) return;
    int tok0 = blockIdx.y * NT;
    const unsigned char* rg[R]; const unsigned char* ru[R];
    #pragma unroll
    for (int r = 0; r < R; r++) { rg[r] = wg + (size_t)(row0 + r) * rb_g; ru[r] = wu + (size_t)(row0 + r) * rb_u; }
    float ag[R][NT], au[R][NT];
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) { ag[r][t] = 0.0f; au[r][t] = 0.0f; }
    rows_dot_any<R, NT>(tg, rg, K, X, 0, tok0, T, ag);
    rows_dot_any<R, NT>(tu, ru, K, X, 0, tok0, T, au);
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            float g = warp_sum(ag[r][t]), u = warp_sum(au[r][t]);
            if (lane == 0 && tok0 + t < T) A[(size_t)(tok0 + t) * n_ff + row0 + r] = act_fn(g, act) * u;
        }
}

#define GLU_ENTRY(NAME, R, NT)                                                                             \
HALO_KERNEL void NAME(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,  \
                      i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {                         \
    GRID_DEPENDENCY_SYNC();                                                                                \
    glu<R, NT>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, T, A);                                         \
}
GLU_ENTRY(halo_glu_r1_t1, 1, 1)
GLU_ENTRY(halo_glu_r1_t4, 1, 4)
GLU_ENTRY(halo_glu_r4_t8, 4, 8)

template <int TYPE>
__device__ __forceinline__ void dq_row(const unsigned char* row, int E, float scale, float* out) {
    for (int g = threadIdx.x; g < (E >> 3); g += blockDim.x) {
        float w[8];
        dq8<TYPE>(row, g, w);
        #pragma unroll
        for (int i = 0; i < 8; i++) out[8 * g + i] = w[i] * scale;
    }
}


// x[t] = dequant(W[ids[t]]) * scale; h[t] = rmsnorm(x[t]) * norm_w. Grid: T blocks.
// Also records the token's id at its KV slot (token_at_slot[slots[t]] = ids[t]): the id history the
// sampler's repetition penalty reads, kept on the device like the K/V it belongs to.
HALO_KERNEL void halo_embed_norm(const unsigned char* W, i32 type, i32 rb, const i32* ids, i32 E, float scale,
                                 const float* norm_w, float eps, float* x, float* h, const i32* slots,
                                 i32* token_at_slot) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32];
    int t = blockIdx.x;
    if (threadIdx.x == 0) token_at_slot[slots[t]] = ids[t];
    const unsigned char* row = W + (size_t)ids[t] * rb;
    float* xr = x + (size_t)t * E;
    switch (type) {
        case T_F32: dq_row<T_F32>(row, E, scale, xr); break;
        case T_F16: dq_row<T_F16>(row, E, scale, xr); break;
        case T_BF16: dq_row<T_BF16>(row, E, scale, xr); break;
        case T_Q4_0: dq_row<T_Q4_0>(row, E, scale, xr); break;
        case T_Q4_1: dq_row<T_Q4_1>(row, E, scale, xr); break;
        case T_Q5_0: dq_row<T_Q5_0>(row, E, scale, xr); break;
        case T_Q5_1: dq_row<T_Q5_1>(row, E, scale, xr); break;
        case T_Q8_0: dq_row<T_Q8_0>(row, E, scale, xr); break;
        case T_Q4_K: dq_row<T_Q4_K>(row, E, scale, xr); break;
        case T_Q5_K: dq_row<T_Q5_K>(row, E, scale, xr); break;
        case T_Q6_K: dq_row<T_Q6_K>(row, E, scale, xr); break;
        case T_MXFP4: dq_row<T_MXFP4>(row, E, scale, xr); break;
        default: break;
    }
    __syncthreads();
    float ss = 0.0f;
    for (int i = threadIdx.x; i < E; i += blockDim.x) ss += xr[i] * xr[i];
    float inv = 1.0f / sqrtf(block_sum(ss, red) / (float)E + eps);
    for (int i = threadIdx.x; i < E; i += blockDim.x) h[(size_t)t * E + i] = xr[i] * inv * norm_w[i];
}

// ---------------------------------------------------------------------------------------------------------
// Decode (T == 1) fast path for the K-quants: 8 lanes share one 256-element super-block, each lane takes
// 16 consecutive quant bytes with wide loads (32 weights per lane per block), so a warp has 4 super-blocks
// in flight per iteration; scales are applied once per 16/32 weights (sum q*x and sum x), never per weight.
// Other types fall back to the generic dq8 loop. One warp per row, same grid as halo_matmul_r1_t1.

// Byte i of w minus off, as a float, exactly: the byte becomes the low mantissa bits of 2^23 (one PRMT) and
// 2^23 + off is subtracted (one FADD). (float)byte is an I2F / I2FP conversion, which issues on a narrower pipe
// than FADD, and a decode matvec converts every weight it reads (run 21 in engine/gpu/NOTES.md measured the two).
__device__ __forceinline__ float byte_f(u32 w, int i, float off = 0.0f) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (u32)i)) - (8388608.0f + off);
}

// 6-bit scale and min of sub-block j (0..7) from the 12 scale bytes held in three words s0, s1, s2
__device__ __forceinline__ void scale_min_k4_reg(int j, u32 s0, u32 s1, u32 s2, float* sc, float* mn) {
    u32 jl = 8u * (u32)(j & 3);
    u32 s, m;
    if (j < 4) { s = (s0 >> jl) & 63u; m = (s1 >> jl) & 63u; }
    else {
        s = ((s2 >> jl) & 15u) | (((s0 >> jl) >> 6 & 3u) << 4);
        m = ((s2 >> jl) >> 4 & 15u) | (((s1 >> jl) >> 6 & 3u) << 4);
    }
    *sc = (float)s; *mn = (float)m;
}

// The 6-bit scales and mins of sub-blocks 2c and 2c + 1 of a Q4_K super-block (s0..s2: its 12 scale bytes) as
// byte pairs: sc / mn hold sub-block 2c's in byte 0 and 2c + 1's in byte 1. As scale_min_k4_reg reads them, both at
// once and without its branch: their bytes are the half (c & 1) of each scale word; sub-blocks 4..7 take their low
// 4 bits from s2 and their top 2 from the upper bits of s0 / s1.
__device__ __forceinline__ void q4k_scale_pairs(u32 s0, u32 s1, u32 s2, int c, u32* sc, u32* mn) {
    u32 sh = 16u * (u32)(c & 1), a0 = s0 >> sh, a1 = s1 >> sh, a2 = s2 >> sh;
    bool upper = c >= 2;
    *sc = upper ? (a2 & 0x0f0fu) | ((a0 >> 2) & 0x3030u) : a0 & 0x3f3fu;
    *mn = upper ? ((a2 >> 4) & 0x0f0fu) | ((a1 >> 2) & 0x3030u) : a1 & 0x3f3fu;
}

// Q4_K lane m's scales (c = m / 2: sub-blocks 2c, 2c + 1 of the super-block whose 16-byte header is hdr):
// the super-block's d and dmin, each sub-block's 6-bit scale and min
__device__ __forceinline__ void q4k_lane_scales(uint4 hdr, int c, float* d, float* dmin, float* s1, float* m1,
                                                float* s2, float* m2) {
    *d = half_to_float(hdr.x & 0xffffu);
    *dmin = half_to_float(hdr.x >> 16);
    u32 sc, mn;                                       // branch-free: the 8 lanes of a super-block take both halves
    q4k_scale_pairs(hdr.y, hdr.z, hdr.w, c, &sc, &mn);
    *s1 = byte_f(sc, 0); *s2 = byte_f(sc, 1);
    *m1 = byte_f(mn, 0); *m2 = byte_f(mn, 1);
}

// sum over the 4 bytes of q (each < 256) of byte i * a[i]
__device__ __forceinline__ float q_dot4(u32 q, float4 a) {
    return byte_f(q, 0) * a.x + byte_f(q, 1) * a.y + byte_f(q, 2) * a.z + byte_f(q, 3) * a.w;
}

// the same with Q6_K's offset: sum of (byte i - 32) * a[i]
__device__ __forceinline__ float q6_dot4(u32 q, float4 a) {
    return byte_f(q, 0, 32.0f) * a.x + byte_f(q, 1, 32.0f) * a.y
         + byte_f(q, 2, 32.0f) * a.z + byte_f(q, 3, 32.0f) * a.w;
}

// Q6_K lane m's share of the super-block at b (210 bytes; lanes as q6k_row_dot's comment says), in two steps so
// a caller can load one super-block while it uses the previous one. The raw words: 5 aligned words around the
// lane's 16 ql bytes, 5 around its 16 qh bytes, its two scale bytes and d's two bytes, each as loaded (nothing
// here waits for a load).
struct Q6kRaw { u32 w[14]; };

__device__ __forceinline__ Q6kRaw q6k_lane_load(const unsigned char* b, int m) {
    int h = m >> 2, l = 16 * (m & 1), si = 8 * h + 2 * ((m >> 1) & 1) + (l >> 4);
    const u32* a = (const u32*)((size_t)(b + 16 * m) & ~(size_t)3);
    const u32* e = (const u32*)((size_t)(b + 128 + 32 * h + l) & ~(size_t)3);
    Q6kRaw raw;
    #pragma unroll
    for (int i = 0; i < 5; i++) { raw.w[i] = __ldg(a + i); raw.w[5 + i] = __ldg(e + i); }
    raw.w[10] = ld_u8(b + 192 + si); raw.w[11] = ld_u8(b + 196 + si);
    raw.w[12] = ld_u8(b + 208); raw.w[13] = ld_u8(b + 209);
    return raw;
}

// The raw words of q6k_lane_load(b, m) as the 6-bit codes of the lane's 16 low-nibble weights (elements
// 128 h + 32 kk + l ..) in the bytes of lo[0..3], of its 16 high-nibble ones (64 elements further) in hi[0..3], and
// their scales: weight = (code - 32) * sc_lo (sc_hi)
__device__ __forceinline__ void q6k_lane_codes(const Q6kRaw& raw, const unsigned char* b, int m, u32* lo, u32* hi,
                                               float* sc_lo, float* sc_hi) {
    int h = m >> 2, kk = (m >> 1) & 1, l = 16 * (m & 1);
    u32 sa = (u32)((size_t)(b + 16 * m) & 3) * 8u, se = (u32)((size_t)(b + 128 + 32 * h + l) & 3) * 8u;
    float d = half_to_float(raw.w[12] | (raw.w[13] << 8));
    *sc_lo = d * (float)(signed char)raw.w[10];
    *sc_hi = d * (float)(signed char)raw.w[11];
    u32 s_lo = 2u * (u32)kk, s_hi = s_lo + 4u;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        u32 ql = (u32)(((((u64)raw.w[i + 1]) << 32) | (u64)raw.w[i]) >> sa);
        u32 qh = (u32)(((((u64)raw.w[6 + i]) << 32) | (u64)raw.w[5 + i]) >> se);
        lo[i] = (ql & 0x0f0f0f0fu) | (((qh >> s_lo) & 0x03030303u) << 4);
        hi[i] = ((ql >> 4) & 0x0f0f0f0fu) | (((qh >> s_hi) & 0x03030303u) << 4);
    }
}

__device__ __forceinline__ void q6k_lane(const unsigned char* b, int m, u32* lo, u32* hi, float* sc_lo,
                                         float* sc_hi) {
    q6k_lane_codes(q6k_lane_load(b, m), b, m, lo, hi, sc_lo, sc_hi);
}

// partial dot of one Q4_K row with x (this lane's share; reduce over the warp)
__device__ __forceinline__ float q4k_row_dot(const unsigned char* row, int K, const float* x) {
    int lane = threadIdx.x & 31, grp = lane >> 3, m = lane & 7;
    int c = m >> 1, l = 16 * (m & 1);
    float acc = 0.0f;
    int nsb = K >> 8;
    #pragma unroll 2
    for (int sb = grp; sb < nsb; sb += 4) {
        const unsigned char* b = row + (size_t)sb * 144;
        uint4 hdr = __ldg((const uint4*)b);
        uint4 q = __ldg((const uint4*)(b + 16 + 16 * m));
        const float4* xl = (const float4*)(x + sb * 256 + 64 * c + l);
        const float4* xh = xl + 8;                             // + 32 elements
        float d, dmin, s1, m1, s2, m2;
        q4k_lane_scales(hdr, c, &d, &dmin, &s1, &m1, &s2, &m2);
        u32 qw[4] = {q.x, q.y, q.z, q.w};
        float dl = 0.0f, sl = 0.0f, dh = 0.0f, sh = 0.0f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = __ldg(xl + i), h = __ldg(xh + i);
            u32 lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
            dl += q_dot4(lo, a);
            dh += q_dot4(hi, h);
            sl += (a.x + a.y) + (a.z + a.w);
            sh += (h.x + h.y) + (h.z + h.w);
        }
        acc += d * (s1 * dl + s2 * dh) - dmin * (m1 * sl + m2 * sh);
    }
    return acc;
}

// partial dot of one Q6_K row with x. Lane m of a group: ql bytes [16m, 16m + 16) = h = m / 4, k in
// {kk, kk + 2} (kk = (m / 2) & 1, low / high nibble), l = 16 (m & 1); qh bytes 128 + 32 h + l .. + 16.
__device__ __forceinline__ float q6k_row_dot(const unsigned char* row, int K, const float* x) {
    int lane = threadIdx.x & 31, grp = lane >> 3, m = lane & 7;
    int h = m >> 2, kk = (m >> 1) & 1, l = 16 * (m & 1);
    float acc = 0.0f;
    int nsb = K >> 8;
    #pragma unroll 2
    for (int sb = grp; sb < nsb; sb += 4) {
        u32 lo[4], hi[4];
        float sc_lo, sc_hi;
        q6k_lane(row + (size_t)sb * 210, m, lo, hi, &sc_lo, &sc_hi);
        const float4* xl = (const float4*)(x + sb * 256 + 128 * h + 32 * kk + l);
        const float4* xh = xl + 16;                            // + 64 elements (k + 2)
        float dl = 0.0f, dh = 0.0f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = __ldg(xl + i), e = __ldg(xh + i);
            dl += q6_dot4(lo[i], a);
            dh += q6_dot4(hi[i], e);
        }
        acc += sc_lo * dl + sc_hi * dh;
    }
    return acc;
}

__device__ __forceinline__ float row_dot_fast(int type, const unsigned char* row, int K, const float* x) {
    if (type == T_Q4_K && (K & 255) == 0) return q4k_row_dot(row, K, x);
    if (type == T_Q6_K && (K & 255) == 0) return q6k_row_dot(row, K, x);
    const unsigned char* rp[1] = {row};
    float acc[1][1] = {{0.0f}};
    rows_dot_any<1, 1>(type, rp, K, x, 0, 0, 1, acc);
    return acc[0][0];
}

// Decode matvecs open with GRID_DEPENDENCY_LATER (prelude.h): before grid_dependency_wait a warp puts its rows,
// nbytes contiguous weight bytes, into L2 (the kw warps sharing the rows take alternate 128-byte lines), so a
// decode step's next matvec has its first loads in flight while the kernel before it finishes. Weights only:
// nothing a previous kernel writes.
__device__ __forceinline__ void prefetch_rows_l2(const unsigned char* p, int nbytes, int kc, int kw) {
    for (int off = ((threadIdx.x & 31) * kw + kc) * 128; off < nbytes; off += 32 * kw * 128) prefetch_l2(p + off);
}

HALO_KERNEL void halo_matmul_kq_t1(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                   const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                   const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                   const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                   float* Y, i32 ldy) {
    GRID_DEPENDENCY_LATER();
    int row0 = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    bool valid = row0 < n0 + n1 + n2;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    if (valid) prefetch_rows_l2(base + (size_t)local * rb, rb, 0, 1);
    grid_dependency_wait();
    if (!valid) return;
    const float* x = X + (size_t)(xrow ? xrow[0] : 0) * K;
    float v = warp_sum(row_dot_fast(type, base + (size_t)local * rb, K, x));
    if ((threadIdx.x & 31) == 0) Y[row0] = v + (bias ? bias[row0] : 0.0f);
}

HALO_KERNEL void halo_glu_kq_t1(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                                i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {
    GRID_DEPENDENCY_LATER();
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r < n_ff) {
        prefetch_rows_l2(wg + (size_t)r * rb_g, rb_g, 0, 1);
        prefetch_rows_l2(wu + (size_t)r * rb_u, rb_u, 0, 1);
    }
    grid_dependency_wait();
    if (r >= n_ff) return;
    float g = warp_sum(row_dot_fast(tg, wg + (size_t)r * rb_g, K, X));
    float u = warp_sum(row_dot_fast(tu, wu + (size_t)r * rb_u, K, X));
    if ((threadIdx.x & 31) == 0) A[r] = act_fn(g, act) * u;
}

// ---------------------------------------------------------------------------------------------------------
// Batched decode (2 <= T <= 16 tokens, e.g. one token of each of T requests): kq_t1's warp per row and wide
// K-quant loads, each weight decoded once into registers and dotted with NT activation rows, so a step of up
// to NT tokens reads the weights once. acc[t] is this lane's share for token tok0 + t (reduce over the warp);
// rows past T are clamped to T - 1 (read twice, never written).
template <int NT>
__device__ __forceinline__ void x_rows(const float* X, const i32* xrow, int K, int tok0, int T, const float** xr) {
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        int tt = tok0 + t < T ? tok0 + t : T - 1;
        xr[t] = X + (size_t)(xrow ? xrow[tt] : tt) * K;
    }
}

template <int NT>
__device__ __forceinline__ void q4k_row_dot_nt(const unsigned char* row, int K, const float* const* xr, float* acc) {
    int lane = threadIdx.x & 31, grp = lane >> 3, m = lane & 7;
    int c = m >> 1, l = 16 * (m & 1);
    int nsb = K >> 8;
    for (int sb = grp; sb < nsb; sb += 4) {
        const unsigned char* b = row + (size_t)sb * 144;
        uint4 hdr = __ldg((const uint4*)b);
        uint4 q = __ldg((const uint4*)(b + 16 + 16 * m));
        float d, dmin, s1, m1, s2, m2;
        q4k_lane_scales(hdr, c, &d, &dmin, &s1, &m1, &s2, &m2);
        u32 qw[4] = {q.x, q.y, q.z, q.w};
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4* xl = (const float4*)(xr[t] + sb * 256 + 64 * c + l);
            const float4* xh = xl + 8;
            float dl = 0.0f, sl = 0.0f, dh = 0.0f, sh = 0.0f;
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 a = __ldg(xl + i), h = __ldg(xh + i);
                u32 lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
                dl += q_dot4(lo, a);
                dh += q_dot4(hi, h);
                sl += (a.x + a.y) + (a.z + a.w);
                sh += (h.x + h.y) + (h.z + h.w);
            }
            acc[t] += d * (s1 * dl + s2 * dh) - dmin * (m1 * sl + m2 * sh);
        }
    }
}

template <int NT>
__device__ __forceinline__ void q6k_row_dot_nt(const unsigned char* row, int K, const float* const* xr, float* acc) {
    int lane = threadIdx.x & 31, grp = lane >> 3, m = lane & 7;
    int h = m >> 2, kk = (m >> 1) & 1, l = 16 * (m & 1);
    int nsb = K >> 8;
    for (int sb = grp; sb < nsb; sb += 4) {
        u32 lo[4], hi[4];
        float sc_lo, sc_hi;
        q6k_lane(row + (size_t)sb * 210, m, lo, hi, &sc_lo, &sc_hi);
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            const float4* xl = (const float4*)(xr[t] + sb * 256 + 128 * h + 32 * kk + l);
            const float4* xh = xl + 16;
            float dl = 0.0f, dh = 0.0f;
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                float4 a = __ldg(xl + i), e = __ldg(xh + i);
                dl += q6_dot4(lo[i], a);
                dh += q6_dot4(hi[i], e);
            }
            acc[t] += sc_lo * dl + sc_hi * dh;
        }
    }
}

template <int NT>
__device__ __forceinline__ void row_dot_fast_nt(int type, const unsigned char* row, int K, const float* X,
                                                const i32* xrow, int tok0, int T, float* acc) {
    const float* xr[NT];
    x_rows<NT>(X, xrow, K, tok0, T, xr);
    if (type == T_Q4_K && (K & 255) == 0) { q4k_row_dot_nt<NT>(row, K, xr, acc); return; }
    if (type == T_Q6_K && (K & 255) == 0) { q6k_row_dot_nt<NT>(row, K, xr, acc); return; }
    const unsigned char* rp[1] = {row};
    float a[1][NT];
    #pragma unroll
    for (int t = 0; t < NT; t++) a[0][t] = 0.0f;
    rows_dot_any<1, NT>(type, rp, K, X, xrow, tok0, T, a);
    #pragma unroll
    for (int t = 0; t < NT; t++) acc[t] += a[0][t];
}

// Grid: (ceil(rows / warps), ceil(T / NT)); block: warps * 32. Arguments as halo_matmul_r1_t1.
template <int NT>
__device__ void matmul_kq_nt(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0, const unsigned char* w1, i32 t1_,
                             i32 n1, i32 rb1, const unsigned char* w2, i32 t2_, i32 n2, i32 rb2, const float* bias,
                             const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy) {
    int row0 = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), tok0 = blockIdx.y * NT;
    if (row0 >= n0 + n1 + n2) return;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    float acc[NT];
    #pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    row_dot_fast_nt<NT>(type, base + (size_t)local * rb, K, X, xrow, tok0, T, acc);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = warp_sum(acc[t]);
        if ((threadIdx.x & 31) == 0 && tok0 + t < T) Y[(size_t)(tok0 + t) * ldy + row0] = v + (bias ? bias[row0] : 0.0f);
    }
}

// Grid and block as matmul_kq_nt; arguments as halo_glu_r1_t1.
template <int NT>
__device__ void glu_kq_nt(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                          i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), tok0 = blockIdx.y * NT;
    if (r >= n_ff) return;
    float g[NT], u[NT];
    #pragma unroll
    for (int t = 0; t < NT; t++) { g[t] = 0.0f; u[t] = 0.0f; }
    row_dot_fast_nt<NT>(tg, wg + (size_t)r * rb_g, K, X, 0, tok0, T, g);
    row_dot_fast_nt<NT>(tu, wu + (size_t)r * rb_u, K, X, 0, tok0, T, u);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        float gs = warp_sum(g[t]), us = warp_sum(u[t]);
        if ((threadIdx.x & 31) == 0 && tok0 + t < T) A[(size_t)(tok0 + t) * n_ff + r] = act_fn(gs, act) * us;
    }
}

#define KQ_MATMUL_ENTRY(NAME, NT)                                                                          \
HALO_KERNEL void NAME(const unsigned char* w0, i32 t0, i32 n0, i32 rb0, const unsigned char* w1, i32 t1,    \
                      i32 n1, i32 rb1, const unsigned char* w2, i32 t2, i32 n2, i32 rb2, const float* bias, \
                      const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy) {                  \
    GRID_DEPENDENCY_SYNC();                                                                                \
    matmul_kq_nt<NT>(w0, t0, n0, rb0, w1, t1, n1, rb1, w2, t2, n2, rb2, bias, X, xrow, K, T, Y, ldy);      \
}
#define KQ_GLU_ENTRY(NAME, NT)                                                                             \
HALO_KERNEL void NAME(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,  \
                      i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {                         \
    GRID_DEPENDENCY_SYNC();                                                                                \
    glu_kq_nt<NT>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, T, A);                                      \
}
KQ_MATMUL_ENTRY(halo_matmul_kq_t4, 4)
KQ_MATMUL_ENTRY(halo_matmul_kq_t8, 8)
KQ_MATMUL_ENTRY(halo_matmul_kq_t16, 16)
KQ_GLU_ENTRY(halo_glu_kq_t4, 4)
KQ_GLU_ENTRY(halo_glu_kq_t8, 8)
KQ_GLU_ENTRY(halo_glu_kq_t16, 16)

// ---------------------------------------------------------------------------------------------------------
// Decode matvec ("mv", single-token steps; the template takes NT tokens, but at 4 and 8 tokens it lost to
// r1_t4 / r4_t8 on an H200 at the 4B shapes (460 vs 510, 540 vs 584 tok/s; 172 registers), so only NT = 1 is
// built). A block of MV_WARPS warps: kw of them (1, 2 or 4: the host picks by K, engine.gpu.forward.mv_split_warps)
// share one row group's K range, the MV_WARPS / kw warp columns take MV_R rows each. Q4_K / Q6_K rows only (other
// types keep kq_t1: through dq8 this scheme was ~10% slower on SmolLM2's Q4_1 rows), with kq_t1's lanes (8 per
// super-block, 16-byte quant loads, scales applied per 16/32 weights). What differs from kq_t1: the rows' loads
// are in flight together, the next trip's before this one's are used (mv_trips), and each activation slice a lane
// loads serves all of them (float32 activations are ~8x the bytes of a Q4_K row; kq_t1 re-read them for every row
// through L1). acc[r][t]: this lane's share of row r, token t; reduced over the warp, then over the kw warps through
// shared memory. Tokens past T repeat token T - 1 (read, never written). Contract (host): every segment's
// rows % 4 == 0 (the matmul's R rows per warp column: 2 or 4), Q4_K / Q6_K rows, K % 256 == 0.
// Before waiting on the previous kernel (programmatic dependent launch) a block prefetches its rows into L2, which
// pays where its blocks start early, behind a norm or the attention (H100, run 23: without it gate/up 617 -> 712 us a
// decode step, q|k|v 380 -> 406, wo 214 -> 223). The matmul's `prefetch` 0 skips it for a launch behind one that
// fills every slot (the FFN down projection behind the GLU: its blocks start no earlier than they load, and the
// prefetch only added work: down 609 -> 577 us a step without it, Qwen3-4B decode 368.1 -> 370.2 tok/s).
// Grid: (ceil(rows / (MV_R * MV_WARPS / kw)), ceil(T / NT)); block: 32 * MV_WARPS.
#define MV_WARPS 4
#define MV_R 2

// One row's raw bytes a lane needs from one super-block, as loaded: mv_trips loads a trip's rows before it uses
// the previous trip's, so their latency overlaps that work (the weights of a decode step are read once, and each
// warp has only 2-3 trips to make: loaded and used in turn, each trip waited a full memory latency).
struct Q4kRaw { uint4 hdr, q; };     // the super-block's 16-byte header, the lane's 16 quant bytes

template <int R>
__device__ __forceinline__ void mv_load(Q4kRaw* raw, const unsigned char* const* rows, int sb, int m) {
    #pragma unroll
    for (int r = 0; r < R; r++) {
        const unsigned char* b = rows[r] + (size_t)sb * 144;
        raw[r].hdr = __ldg((const uint4*)b);
        raw[r].q = __ldg((const uint4*)(b + 16 + 16 * m));
    }
}

template <int R>
__device__ __forceinline__ void mv_load(Q6kRaw* raw, const unsigned char* const* rows, int sb, int m) {
    #pragma unroll
    for (int r = 0; r < R; r++) raw[r] = q6k_lane_load(rows[r] + (size_t)sb * 210, m);
}

template <int R, int NT>
__device__ __forceinline__ void mv_use(const Q4kRaw* raw, const unsigned char* const* rows, int sb, int m,
                                       const float* const* xr, float (*acc)[NT]) {
    int c = m >> 1, l = 16 * (m & 1);
    float d[R], dmin[R], s1[R], m1[R], s2[R], m2[R];
    #pragma unroll
    for (int r = 0; r < R; r++) q4k_lane_scales(raw[r].hdr, c, &d[r], &dmin[r], &s1[r], &m1[r], &s2[r], &m2[r]);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        const float4* xl = (const float4*)(xr[t] + sb * 256 + 64 * c + l);
        float4 a[4], h[4];
        float sl = 0.0f, sh = 0.0f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            a[i] = __ldg(xl + i);
            h[i] = __ldg(xl + 8 + i);                          // + 32 elements
            sl += (a[i].x + a[i].y) + (a[i].z + a[i].w);
            sh += (h[i].x + h[i].y) + (h[i].z + h[i].w);
        }
        #pragma unroll
        for (int r = 0; r < R; r++) {
            u32 qw[4] = {raw[r].q.x, raw[r].q.y, raw[r].q.z, raw[r].q.w};
            float dl = 0.0f, dh = 0.0f;
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                u32 lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
                dl += q_dot4(lo, a[i]);
                dh += q_dot4(hi, h[i]);
            }
            acc[r][t] += d[r] * (s1[r] * dl + s2[r] * dh) - dmin[r] * (m1[r] * sl + m2[r] * sh);
        }
    }
}

// Q6_K lanes as q6k_row_dot: lane m takes ql bytes [16m, 16m + 16) and the matching qh bytes
template <int R, int NT>
__device__ __forceinline__ void mv_use(const Q6kRaw* raw, const unsigned char* const* rows, int sb, int m,
                                       const float* const* xr, float (*acc)[NT]) {
    int h = m >> 2, kk = (m >> 1) & 1, l = 16 * (m & 1);
    u32 lo[R][4], hi[R][4];
    float sc_lo[R], sc_hi[R];
    #pragma unroll
    for (int r = 0; r < R; r++)
        q6k_lane_codes(raw[r], rows[r] + (size_t)sb * 210, m, lo[r], hi[r], &sc_lo[r], &sc_hi[r]);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        const float4* xl = (const float4*)(xr[t] + sb * 256 + 128 * h + 32 * kk + l);
        float4 a[4], e[4];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            a[i] = __ldg(xl + i);
            e[i] = __ldg(xl + 16 + i);                         // + 64 elements
        }
        #pragma unroll
        for (int r = 0; r < R; r++) {
            float dl = 0.0f, dh = 0.0f;
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                dl += q6_dot4(lo[r][i], a[i]);
                dh += q6_dot4(hi[r][i], e[i]);
            }
            acc[r][t] += sc_lo[r] * dl + sc_hi[r] * dh;
        }
    }
}

// This lane group's trips over super-blocks sb, sb + ng, .. < nsb of R rows of one type (Raw). AHEAD: load the
// next trip's rows before using this one's (R more Raw in registers: Q6_K's 14 words a row made 4 rows ~165
// registers, so a GLU whose gate and up are both Q6_K loads in turn).
template <class Raw, int R, int NT, bool AHEAD>
__device__ __forceinline__ void mv_trips(const unsigned char* const* rows, int sb, int nsb, int ng, int m,
                                         const float* const* xr, float (*acc)[NT]) {
    if (!AHEAD) {
        for (; sb < nsb; sb += ng) {
            Raw raw[R];
            mv_load<R>(raw, rows, sb, m);
            mv_use<R, NT>(raw, rows, sb, m, xr, acc);
        }
        return;
    }
    if (sb >= nsb) return;
    Raw raw[R];
    mv_load<R>(raw, rows, sb, m);
    for (;;) {
        int next = sb + ng;
        Raw ahead[R];
        if (next < nsb) mv_load<R>(ahead, rows, next, m);
        mv_use<R, NT>(raw, rows, sb, m, xr, acc);
        if (next >= nsb) return;
        #pragma unroll
        for (int r = 0; r < R; r++) raw[r] = ahead[r];
        sb = next;
    }
}

// this warp's share (warp column kc of kw) of R rows of one type
template <int R, int NT>
__device__ __forceinline__ void mv_dot(int type, const unsigned char* const* rows, int K, const float* const* xr, int kc,
                                       int kw, float (*acc)[NT]) {
    int lane = threadIdx.x & 31, m = lane & 7, ng = 4 * kw, nsb = K >> 8, sb = 4 * kc + (lane >> 3);
    if (type == T_Q4_K) mv_trips<Q4kRaw, R, NT, true>(rows, sb, nsb, ng, m, xr, acc);
    else mv_trips<Q6kRaw, R, NT, (R <= 2)>(rows, sb, nsb, ng, m, xr, acc);
}

// Sum acc over the warp, then over the kw warps of a row group (red: MV_WARPS * N * NT floats); the result is
// complete in warp column 0's lanes.
template <int N, int NT>
__device__ __forceinline__ void mv_reduce(float (*acc)[NT], int kw, float* red) {
    #pragma unroll
    for (int r = 0; r < N; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = warp_sum(acc[r][t]);
    if (kw == 1) return;
    int warp = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0)
        #pragma unroll
        for (int r = 0; r < N; r++)
            #pragma unroll
            for (int t = 0; t < NT; t++) red[(warp * N + r) * NT + t] = acc[r][t];
    __syncthreads();
    if (warp % kw) return;
    #pragma unroll
    for (int r = 0; r < N; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = 0.0f;
            for (int k = 0; k < kw; k++) s += red[((warp + k) * N + r) * NT + t];
            acc[r][t] = s;
        }
}

// x rows of tokens tok0 .. tok0 + NT - 1 (through xrow when given; clamped to T - 1)
template <int NT>
__device__ __forceinline__ void mv_x_rows(const float* X, const i32* xrow, int K, int tok0, int T, const float** xr) {
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        int tt = tok0 + t < T ? tok0 + t : T - 1;
        xr[t] = X + (size_t)(xrow ? xrow[tt] : tt) * K;
    }
}

// R rows per warp column: MV_R (halo_matmul_mv_t1) or 2 MV_R (halo_matmul_mv4_t1: as many as the GLU's gate and
// up rows per warp, so twice the bytes in flight per warp and half the blocks; the host's choice,
// engine.gpu.forward.mv_matmul_shape)
template <int R, int NT>
__device__ void matmul_mv(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0, const unsigned char* w1, i32 t1_,
                          i32 n1, i32 rb1, const unsigned char* w2, i32 t2_, i32 n2, i32 rb2, const float* bias,
                          const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy, i32 kw,
                          i32 prefetch) {
    __shared__ float red[MV_WARPS * R * NT];
    int warp = threadIdx.x >> 5, kc = warp % kw, tok0 = blockIdx.y * NT;
    int row0 = (blockIdx.x * (MV_WARPS / kw) + warp / kw) * R;
    bool valid = row0 < n0 + n1 + n2;
    int rr = valid ? row0 : 0;                  // out-of-range warps read row 0 and join the block's reduction
    const unsigned char* base; int type, rb, local;
    if (rr < n0) { base = w0; type = t0_; rb = rb0; local = rr; }
    else if (rr < n0 + n1) { base = w1; type = t1_; rb = rb1; local = rr - n0; }
    else { base = w2; type = t2_; rb = rb2; local = rr - n0 - n1; }
    const unsigned char* rp[R];
    #pragma unroll
    for (int r = 0; r < R; r++) rp[r] = base + (size_t)(local + r) * rb;
    if (prefetch) prefetch_rows_l2(rp[0], R * rb, kc, kw);
    grid_dependency_wait();
    const float* xr[NT];
    mv_x_rows<NT>(X, xrow, K, tok0, T, xr);
    float acc[R][NT];
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    mv_dot<R, NT>(type, rp, K, xr, kc, kw, acc);
    mv_reduce<R, NT>(acc, kw, red);
    if (!valid || kc || (threadIdx.x & 31)) return;
    #pragma unroll
    for (int r = 0; r < R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++)
            if (tok0 + t < T) Y[(size_t)(tok0 + t) * ldy + row0 + r] = acc[r][t] + (bias ? bias[row0 + r] : 0.0f);
}

// acc[r] = gate row rg[r] . x, acc[MV_R + r] = up row ru[r] . x (r < MV_R), this warp column's share summed over the
// warp and the kw warps of its row group (complete in warp column 0; red: MV_WARPS * 2 MV_R * NT floats)
template <int NT>
__device__ __forceinline__ void glu_mv_dots(int tg, const unsigned char* const* rg, int tu, const unsigned char* const* ru,
                                            int K, const float* const* xr, int kc, int kw, float (*acc)[NT],
                                            float* red) {
    #pragma unroll
    for (int r = 0; r < 2 * MV_R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;
    if (tg == tu) {                             // one pass: the 2 MV_R rows' loads in flight together
        const unsigned char* both[2 * MV_R];
        #pragma unroll
        for (int r = 0; r < MV_R; r++) { both[r] = rg[r]; both[MV_R + r] = ru[r]; }
        mv_dot<2 * MV_R, NT>(tg, both, K, xr, kc, kw, acc);
    } else {
        mv_dot<MV_R, NT>(tg, rg, K, xr, kc, kw, acc);
        mv_dot<MV_R, NT>(tu, ru, K, xr, kc, kw, acc + MV_R);
    }
    mv_reduce<2 * MV_R, NT>(acc, kw, red);
}

// A[t, r] = act(gate_r . x_t) * (up_r . x_t) for MV_R rows r per warp column; contract: n_ff % MV_R == 0.
template <int NT>
__device__ void glu_mv(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                       i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 kw) {
    __shared__ float red[MV_WARPS * 2 * MV_R * NT];
    int warp = threadIdx.x >> 5, kc = warp % kw, tok0 = blockIdx.y * NT;
    int row0 = (blockIdx.x * (MV_WARPS / kw) + warp / kw) * MV_R;
    bool valid = row0 < n_ff;
    int rr = valid ? row0 : 0;
    const unsigned char* rg[MV_R];
    const unsigned char* ru[MV_R];
    #pragma unroll
    for (int r = 0; r < MV_R; r++) {
        rg[r] = wg + (size_t)(rr + r) * rb_g;
        ru[r] = wu + (size_t)(rr + r) * rb_u;
    }
    prefetch_rows_l2(rg[0], MV_R * rb_g, kc, kw);
    prefetch_rows_l2(ru[0], MV_R * rb_u, kc, kw);
    grid_dependency_wait();
    const float* xr[NT];
    mv_x_rows<NT>(X, 0, K, tok0, T, xr);
    float acc[2 * MV_R][NT];                    // gate rows, then up rows
    glu_mv_dots<NT>(tg, rg, tu, ru, K, xr, kc, kw, acc, red);
    if (!valid || kc || (threadIdx.x & 31)) return;
    #pragma unroll
    for (int r = 0; r < MV_R; r++)
        #pragma unroll
        for (int t = 0; t < NT; t++)
            if (tok0 + t < T) A[(size_t)(tok0 + t) * n_ff + row0 + r] = act_fn(acc[r][t], act) * acc[MV_R + r][t];
}

// Entries written out (not by macro): kernels.entries reads their names to launch them programmatically.
HALO_KERNEL void halo_matmul_mv_t1(const unsigned char* w0, i32 t0, i32 n0, i32 rb0, const unsigned char* w1,
                                   i32 t1, i32 n1, i32 rb1, const unsigned char* w2, i32 t2, i32 n2, i32 rb2,
                                   const float* bias, const float* X, const i32* xrow, i32 K, i32 T, float* Y,
                                   i32 ldy, i32 kw, i32 prefetch) {
    GRID_DEPENDENCY_LATER();
    matmul_mv<MV_R, 1>(w0, t0, n0, rb0, w1, t1, n1, rb1, w2, t2, n2, rb2, bias, X, xrow, K, T, Y, ldy, kw,
                       prefetch);                                                                   // waits
}

HALO_KERNEL void halo_matmul_mv4_t1(const unsigned char* w0, i32 t0, i32 n0, i32 rb0, const unsigned char* w1,
                                    i32 t1, i32 n1, i32 rb1, const unsigned char* w2, i32 t2, i32 n2, i32 rb2,
                                    const float* bias, const float* X, const i32* xrow, i32 K, i32 T, float* Y,
                                    i32 ldy, i32 kw, i32 prefetch) {
    GRID_DEPENDENCY_LATER();
    matmul_mv<2 * MV_R, 1>(w0, t0, n0, rb0, w1, t1, n1, rb1, w2, t2, n2, rb2, bias, X, xrow, K, T, Y, ldy, kw,
                           prefetch);                                                               // waits
}

HALO_KERNEL void halo_glu_mv_t1(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                                i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 kw) {
    GRID_DEPENDENCY_LATER();
    glu_mv<1>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, T, A, kw);                                   // waits
}

// ---------------------------------------------------------------------------------------------------------
// Batched decode from shared activations (9 <= T <= 16 tokens, Q4_K / Q6_K rows, K % 256 == 0; the host checks):
// a block of BQ_WARPS warps takes BQ_ROWS rows, 4 per warp with kq_t1's 8 lanes per super-block (lane m of
// row group grp = lane / 8 takes 16 quant bytes with wide loads). Per super-block the block stages the NT
// tokens' 256 activations in shared memory once; the 4 row groups of a warp read the same addresses
// (broadcast), so every activation a block loads from L2 serves BQ_ROWS rows, where kq_tN made every warp
// re-read all NT rows of X through L1 for each weight row (the traffic that bounded batched decode).
// Scales are applied per 16/32 weights as in kq_t1. Tokens past T read zeros and are never written.
// Grid: (ceil(rows / BQ_ROWS), ceil(T / NT)); block: 32 * BQ_WARPS. Arguments as halo_matmul_kq_tN.
#define BQ_WARPS 4
#define BQ_ROWS (4 * BQ_WARPS)
#define BQ_XLD (256 + 16)          // a token's 256 activations, 4 floats of padding per 64: Q4_K's 8 lanes of a
__device__ __forceinline__ int bq_pos(int k) { return k + 4 * (k >> 6); }   // group hit distinct banks

// xs[t][bq_pos(k)] = X[xrow(tok0 + t)][256 sb + k] (0 past T)
template <int NT>
__device__ __forceinline__ void bq_stage(const float* X, const i32* xrow, int K, int T, int tok0, int sb, float* xs) {
    for (int i = threadIdx.x; i < NT * 64; i += blockDim.x) {
        int t = i >> 6, c = i & 63, tok = tok0 + t;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tok < T) v = __ldg((const float4*)(X + (size_t)(xrow ? xrow[tok] : tok) * K + 256 * sb) + c);
        *(float4*)(xs + t * BQ_XLD + bq_pos(4 * c)) = v;
    }
}

template <int NT>
__device__ __forceinline__ void q4k_sb_nt(const unsigned char* b, int m, const float* xs, float* acc) {
    int c = m >> 1, l = 16 * (m & 1);
    uint4 hdr = __ldg((const uint4*)b);
    uint4 q = __ldg((const uint4*)(b + 16 + 16 * m));
    float d, dmin, s1, m1, s2, m2;
    q4k_lane_scales(hdr, c, &d, &dmin, &s1, &m1, &s2, &m2);
    u32 qw[4] = {q.x, q.y, q.z, q.w};
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        const float4* xl = (const float4*)(xs + t * BQ_XLD + bq_pos(64 * c + l));
        const float4* xh = xl + 8;                             // + 32 elements (same 64-run: same padding)
        float dl = 0.0f, sl = 0.0f, dh = 0.0f, sh = 0.0f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = xl[i], h = xh[i];
            u32 lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
            dl += q_dot4(lo, a);
            dh += q_dot4(hi, h);
            sl += (a.x + a.y) + (a.z + a.w);
            sh += (h.x + h.y) + (h.z + h.w);
        }
        acc[t] += d * (s1 * dl + s2 * dh) - dmin * (m1 * sl + m2 * sh);
    }
}

template <int NT>
__device__ __forceinline__ void q6k_sb_nt(const unsigned char* b, int m, const float* xs, float* acc) {
    int h = m >> 2, kk = (m >> 1) & 1, l = 16 * (m & 1);
    u32 lo[4], hi[4];
    float sc_lo, sc_hi;
    q6k_lane(b, m, lo, hi, &sc_lo, &sc_hi);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        const float4* xl = (const float4*)(xs + t * BQ_XLD + bq_pos(128 * h + 32 * kk + l));
        const float4* xh = (const float4*)(xs + t * BQ_XLD + bq_pos(128 * h + 32 * kk + l + 64));
        float dl = 0.0f, dh = 0.0f;
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 a = xl[i], e = xh[i];
            dl += q6_dot4(lo[i], a);
            dh += q6_dot4(hi[i], e);
        }
        acc[t] += sc_lo * dl + sc_hi * dh;
    }
}

template <int NT>
__device__ __forceinline__ void bq_sb(int type, const unsigned char* row, int sb, int m, const float* xs, float* acc) {
    if (type == T_Q4_K) q4k_sb_nt<NT>(row + (size_t)sb * 144, m, xs, acc);
    else q6k_sb_nt<NT>(row + (size_t)sb * 210, m, xs, acc);
}

// sum over the 8 lanes of a row group (every lane gets it)
__device__ __forceinline__ float group8_sum(float v) {
    v += SHFL_XOR(v, 1);
    v += SHFL_XOR(v, 2);
    v += SHFL_XOR(v, 4);
    return v;
}

// The bq kernels' k loop over super-blocks [sb0, sb1): each super-block's activations of the tile's tokens (bq_stage's
// xrow, T, tok0) staged in xs once for the block, then this lane's share of its row's dots into acc[NT] (zeroed
// here; valid: the lane has a row, the barriers are every thread's)
template <int NT>
__device__ __forceinline__ void bq_rows_acc(int type, const unsigned char* rp, bool valid, const float* X,
                                            const i32* xrow, int K, int T, int tok0, int sb0, int sb1, float* xs,
                                            float* acc) {
    #pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int sb = sb0; sb < sb1; sb++) {
        __syncthreads();
        bq_stage<NT>(X, xrow, K, T, tok0, sb, xs);
        __syncthreads();
        if (valid) bq_sb<NT>(type, rp, sb, threadIdx.x & 7, xs, acc);
    }
}

// ... and the GLU's: its gate and up rows' dots into g and u, over every super-block
template <int NT>
__device__ __forceinline__ void bq_glu_acc(int tg, const unsigned char* rg, int tu, const unsigned char* ru,
                                           bool valid, const float* X, const i32* xrow, int K, int T, int tok0,
                                           float* xs, float* g, float* u) {
    #pragma unroll
    for (int t = 0; t < NT; t++) { g[t] = 0.0f; u[t] = 0.0f; }
    for (int sb = 0; sb < (K >> 8); sb++) {
        __syncthreads();
        bq_stage<NT>(X, xrow, K, T, tok0, sb, xs);
        __syncthreads();
        if (valid) {
            bq_sb<NT>(tg, rg, sb, threadIdx.x & 7, xs, g);
            bq_sb<NT>(tu, ru, sb, threadIdx.x & 7, xs, u);
        }
    }
}

// Split K (gridDim.z > 1; the host splits matrices of few rows, a 4B model's down and wo, which gave 160 blocks
// for 132 SMs): block z takes super-blocks [z ksb, (z + 1) ksb) and writes its partial sums to
// P[z][t][row], added in z order by halo_splitk_sum.
template <int NT>
__device__ void matmul_bq(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0, const unsigned char* w1, i32 t1_,
                          i32 n1, i32 rb1, const unsigned char* w2, i32 t2_, i32 n2, i32 rb2, const float* bias,
                          const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy, i32 ksb, float* P) {
    __shared__ __align__(16) float xs[NT * BQ_XLD];
    int lane = threadIdx.x & 31, m = lane & 7;
    int row = blockIdx.x * BQ_ROWS + 4 * (threadIdx.x >> 5) + (lane >> 3), tok0 = blockIdx.y * NT;
    bool valid = row < n0 + n1 + n2;
    const unsigned char* base; int type, rb, local;
    if (row < n0) { base = w0; type = t0_; rb = rb0; local = row; }
    else if (row < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row - n0 - n1; }
    const unsigned char* rp = valid ? base + (size_t)local * rb : 0;
    float acc[NT];
    bq_rows_acc<NT>(type, rp, valid, X, xrow, K, T, tok0, blockIdx.z * ksb, min(K >> 8, (int)(blockIdx.z + 1) * ksb),
                    xs, acc);
    int rows = n0 + n1 + n2;
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = group8_sum(acc[t]);
        if (!valid || m != 0 || tok0 + t >= T) continue;
        if (gridDim.z > 1) P[((size_t)blockIdx.z * T + tok0 + t) * rows + row] = v;
        else Y[(size_t)(tok0 + t) * ldy + row] = v + (bias ? bias[row] : 0.0f);
    }
}

// Grid and block as matmul_bq; arguments as halo_glu_kq_tN.
template <int NT>
__device__ void glu_bq(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                       i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {
    __shared__ __align__(16) float xs[NT * BQ_XLD];
    int lane = threadIdx.x & 31, m = lane & 7;
    int r = blockIdx.x * BQ_ROWS + 4 * (threadIdx.x >> 5) + (lane >> 3), tok0 = blockIdx.y * NT;
    bool valid = r < n_ff;
    const unsigned char* rg = valid ? wg + (size_t)r * rb_g : 0;
    const unsigned char* ru = valid ? wu + (size_t)r * rb_u : 0;
    float g[NT], u[NT];
    bq_glu_acc<NT>(tg, rg, tu, ru, valid, X, 0, K, T, tok0, xs, g, u);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        float gs = group8_sum(g[t]), us = group8_sum(u[t]);
        if (valid && m == 0 && tok0 + t < T) A[(size_t)(tok0 + t) * n_ff + r] = act_fn(gs, act) * us;
    }
}

#define BQ_MATMUL_ENTRY(NAME, NT)                                                                          \
HALO_KERNEL void NAME(const unsigned char* w0, i32 t0, i32 n0, i32 rb0, const unsigned char* w1, i32 t1,    \
                      i32 n1, i32 rb1, const unsigned char* w2, i32 t2, i32 n2, i32 rb2, const float* bias, \
                      const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy, i32 ksb, float* P) {  \
    GRID_DEPENDENCY_SYNC();                                                                                   \
    matmul_bq<NT>(w0, t0, n0, rb0, w1, t1, n1, rb1, w2, t2, n2, rb2, bias, X, xrow, K, T, Y, ldy, ksb, P);  \
}
#define BQ_GLU_ENTRY(NAME, NT)                                                                             \
HALO_KERNEL void NAME(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,  \
                      i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {                         \
    GRID_DEPENDENCY_SYNC();                                                                                \
    glu_bq<NT>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, T, A);                                         \
}
BQ_MATMUL_ENTRY(halo_matmul_bq_t16, 16)
BQ_GLU_ENTRY(halo_glu_bq_t16, 16)

// ---------------------------------------------------------------------------------------------------------
// Prefill tile (T > 8): a block of 128 threads computes 32 weight rows x 64 tokens. Per 64-wide k step it
// dequantizes the weight tile once into shared memory (Ws[k][row], any type through dq8) and stages the
// activations (Xs[k][token]); each thread then accumulates a 4 rows x 4 tokens micro-tile from shared
// memory, so every weight is decoded once per 64 tokens instead of once per 8.
// Contract (checked on the host): every segment's rows % 32 == 0, K % 64 == 0.
// Grid: (rows / 32, ceil(T / 64)); block: 128.
#define GT_BM 32
#define GT_BN 64
#define GT_BK 64
#define GT_WS (GT_BM + 4)
#define GT_XS (GT_BN + 4)

__device__ __forceinline__ void dq8_any(int type, const unsigned char* row, int g, float* w) {
    switch (type) {
        case T_F32: dq8<T_F32>(row, g, w); break;
        case T_F16: dq8<T_F16>(row, g, w); break;
        case T_BF16: dq8<T_BF16>(row, g, w); break;
        case T_Q4_0: dq8<T_Q4_0>(row, g, w); break;
        case T_Q4_1: dq8<T_Q4_1>(row, g, w); break;
        case T_Q5_0: dq8<T_Q5_0>(row, g, w); break;
        case T_Q5_1: dq8<T_Q5_1>(row, g, w); break;
        case T_Q8_0: dq8<T_Q8_0>(row, g, w); break;
        case T_Q4_K: dq8<T_Q4_K>(row, g, w); break;
        case T_Q5_K: dq8<T_Q5_K>(row, g, w); break;
        case T_Q6_K: dq8<T_Q6_K>(row, g, w); break;
        case T_MXFP4: dq8<T_MXFP4>(row, g, w); break;
        default:
            #pragma unroll
            for (int i = 0; i < 8; i++) w[i] = 0.0f;
            break;
    }
}

// Ws[k][r] = W[row0 + r][k0 + k] for the 32 x 64 tile: thread t decodes row t / 4, groups t % 4 + 4 j (four
// neighbouring lanes read neighbouring bytes of one row)
__device__ __forceinline__ void gt_load_w(int type, const unsigned char* rows, int rb, int k0, float* Ws) {
    int t = threadIdx.x, r = t >> 2;
    const unsigned char* rp = rows + (size_t)r * rb;
    #pragma unroll
    for (int j = 0; j < 2; j++) {
        int gi = (t & 3) + 4 * j;
        float w[8];
        dq8_any(type, rp, (k0 >> 3) + gi, w);
        #pragma unroll
        for (int i = 0; i < 8; i++) Ws[(8 * gi + i) * GT_WS + r] = w[i];
    }
}

// Xs[k][n] = X[xrow(tok0 + n)][k0 + k] (0 past T): thread t loads token t % 64, 8 floats at 8 * (t / 64 + 2 j)
__device__ __forceinline__ void gt_load_x(const float* X, const i32* xrow, int K, int T, int tok0, int k0,
                                          float* Xs) {
    int t = threadIdx.x, n = t & 63, tok = tok0 + n;
    const float* xr = X + (size_t)(tok < T ? (xrow ? xrow[tok] : tok) : 0) * K + k0;
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        int k8 = (t >> 6) + 2 * j;
        float4 a = make_float4(0.f, 0.f, 0.f, 0.f), b = a;
        if (tok < T) { a = *(const float4*)(xr + 8 * k8); b = *(const float4*)(xr + 8 * k8 + 4); }
        float* s = Xs + (8 * k8) * GT_XS + n;
        s[0] = a.x; s[GT_XS] = a.y; s[2 * GT_XS] = a.z; s[3 * GT_XS] = a.w;
        s[4 * GT_XS] = b.x; s[5 * GT_XS] = b.y; s[6 * GT_XS] = b.z; s[7 * GT_XS] = b.w;
    }
}

__device__ __forceinline__ void gt_fma(const float* Ws, const float* Xs, float (*acc)[4]) {
    int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    #pragma unroll 8
    for (int k = 0; k < GT_BK; k++) {
        float4 w = *(const float4*)(Ws + k * GT_WS + 4 * ty);
        float4 x = *(const float4*)(Xs + k * GT_XS + 4 * tx);
        float wr[4] = {w.x, w.y, w.z, w.w}, xn[4] = {x.x, x.y, x.z, x.w};
        #pragma unroll
        for (int r = 0; r < 4; r++)
            #pragma unroll
            for (int n = 0; n < 4; n++) acc[r][n] += wr[r] * xn[n];
    }
}

// Stage k0 of the tile, between barriers: k0 .. k0 + 63 of the 32 weight rows decoded into Ws, of the tokens'
// activations into Xs (gt's loop and the WMMA tile's)
__device__ __forceinline__ void gt_stage(int type, const unsigned char* rows, int rb, const float* X, const i32* xrow,
                                         int K, int T, int tok0, int k0, float* Ws, float* Xs) {
    __syncthreads();
    gt_load_w(type, rows, rb, k0, Ws);
    gt_load_x(X, xrow, K, T, tok0, k0, Xs);
    __syncthreads();
}

// The same for a GLU's gate rows (into Wg) and up rows (into Wu) over the same activations
__device__ __forceinline__ void gt_glu_stage(int tg, const unsigned char* rg, int rb_g, int tu, const unsigned char* ru,
                                             int rb_u, const float* X, const i32* xrow, int K, int T, int tok0, int k0,
                                             float* Wg, float* Wu, float* Xs) {
    __syncthreads();
    gt_load_w(tg, rg, rb_g, k0, Wg);
    gt_load_w(tu, ru, rb_u, k0, Wu);
    gt_load_x(X, xrow, K, T, tok0, k0, Xs);
    __syncthreads();
}

// The tile's k loop: acc[r][n] = rows 4 ty + r of `rows` (32 rows of `type`, rb bytes apart) . X[xrow(tok0 + 4 tx + n)]
// over K (ty = t / 16, tx = t % 16), each 64-k stage's weights and activations staged in Ws / Xs
__device__ __forceinline__ void gt_loop(int type, const unsigned char* rows, int rb, const float* X, const i32* xrow,
                                        int K, int T, int tok0, float* Ws, float* Xs, float (*acc)[4]) {
    #pragma unroll
    for (int r = 0; r < 4; r++)
        #pragma unroll
        for (int n = 0; n < 4; n++) acc[r][n] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += GT_BK) {
        gt_stage(type, rows, rb, X, xrow, K, T, tok0, k0, Ws, Xs);
        gt_fma(Ws, Xs, acc);
    }
}

// The same for gate rows rg and up rows ru over the same activations, into ag and au
__device__ __forceinline__ void gt_glu_loop(int tg, const unsigned char* rg, int rb_g, int tu, const unsigned char* ru,
                                            int rb_u, const float* X, const i32* xrow, int K, int T, int tok0,
                                            float* Wg, float* Wu, float* Xs, float (*ag)[4], float (*au)[4]) {
    #pragma unroll
    for (int r = 0; r < 4; r++)
        #pragma unroll
        for (int n = 0; n < 4; n++) { ag[r][n] = 0.0f; au[r][n] = 0.0f; }
    for (int k0 = 0; k0 < K; k0 += GT_BK) {
        gt_glu_stage(tg, rg, rb_g, tu, ru, rb_u, X, xrow, K, T, tok0, k0, Wg, Wu, Xs);
        gt_fma(Wg, Xs, ag);
        gt_fma(Wu, Xs, au);
    }
}

HALO_KERNEL void halo_matmul_gt(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                float* Y, i32 ldy) {
    GRID_DEPENDENCY_SYNC();
    __shared__ __align__(16) float Ws[GT_BK * GT_WS];
    __shared__ __align__(16) float Xs[GT_BK * GT_XS];
    int row0 = blockIdx.x * GT_BM, tok0 = blockIdx.y * GT_BN;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rows = base + (size_t)local * rb;
    float acc[4][4];
    gt_loop(type, rows, rb, X, xrow, K, T, tok0, Ws, Xs, acc);
    int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    #pragma unroll
    for (int n = 0; n < 4; n++) {
        int tok = tok0 + 4 * tx + n;
        if (tok >= T) continue;
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            int row = row0 + 4 * ty + r;
            Y[(size_t)tok * ldy + row] = acc[r][n] + (bias ? bias[row] : 0.0f);
        }
    }
}

// GLU on the same tile: gate and up tiles side by side; A[t, r] = act(gate . x) * (up . x). n_ff % 32 == 0.
HALO_KERNEL void halo_glu_gt(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                             i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {
    GRID_DEPENDENCY_SYNC();
    __shared__ __align__(16) float Wg[GT_BK * GT_WS];
    __shared__ __align__(16) float Wu[GT_BK * GT_WS];
    __shared__ __align__(16) float Xs[GT_BK * GT_XS];
    int row0 = blockIdx.x * GT_BM, tok0 = blockIdx.y * GT_BN;
    const unsigned char* rg = wg + (size_t)row0 * rb_g;
    const unsigned char* ru = wu + (size_t)row0 * rb_u;
    float ag[4][4], au[4][4];
    gt_glu_loop(tg, rg, rb_g, tu, ru, rb_u, X, 0, K, T, tok0, Wg, Wu, Xs, ag, au);
    int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    #pragma unroll
    for (int n = 0; n < 4; n++) {
        int tok = tok0 + 4 * tx + n;
        if (tok >= T) continue;
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            int row = row0 + 4 * ty + r;
            A[(size_t)tok * n_ff + row] = act_fn(ag[r][n], act) * au[r][n];
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Prefill on RDNA3 / RDNA3.5 WMMA (gfx1100-1102, gfx1150, gfx1151 = Strix Halo): the gt tile (same grid, block,
// contract and shared-memory staging: 32 rows x 64 tokens, k stage 64) with the products on
// v_wmma_f32_16x16x16_f16 instead of FMAs. RDNA's WMMA takes f16 / bf16 operands only, so for float32-level
// results both operands are split in two f16 parts (x = hi + lo, 11 + 11 bits) and a*b is taken as
// alo*bhi + ahi*blo + ahi*bhi ("3xF16", the 3xTF32 scheme of the tc tile). f16's range (max 65504, normal
// down to 6e-5) would not hold raw activations or weights, so every stage's weight tile and activation tile are
// scaled by a power of two that puts their largest magnitude just below 2^15 (exact: only exponents change);
// the stage's products, accumulated in a fresh f32 fragment, are scaled back when added to the f32 accumulator.
// Elements far below their tile's largest keep ~2^-22 of that largest, the float32-level bound the tile tests
// use (|Y - Y64| / (|X| |W|)). Wave w (4 waves of 32) owns rows 16 (w & 1) .. +16 and tokens 32 (w >> 1) .. +32
// (two 16 x 16 tiles). Fragments (wave32, 16x16x16): A lane l holds row l % 16, k 0..15; B lane l holds token
// column l % 16, k 0..15 (lanes 16-31 repeat 0-15); C/D lane l holds column l % 16, rows 2 i + l / 16, i < 8.
// Only compiled (gfx11 targets of the prebuilt build): no AMD GPU has run it, so the host takes it only when
// asked (HALO_GPU_TILES=wmma); elsewhere it compiles to nothing.
#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1150__) || \
    defined(__gfx1151__)
#define HALO_WMMA 1
typedef _Float16 halo_h16 __attribute__((ext_vector_type(16)));
typedef float halo_f8 __attribute__((ext_vector_type(8)));

// max |v| over the block (128 threads); red: >= 32 floats of shared memory
__device__ float block_max_abs(float v, float* red) {
    v = warp_max(v);
    __syncthreads();
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    float m = 0.0f;
    for (int i = 0; i < (int)(blockDim.x >> 5); i++) m = fmaxf(m, red[i]);
    return m;
}

// 2^e with max * 2^e in [2^14, 2^15) (1 for an all-zero tile)
__device__ __forceinline__ float wm_scale(float max_abs) { return ldexpf(1.0f, -f16_split_exponent(max_abs)); }

// hi / lo f16 parts of 16 values read with stride `stride` from p, scaled by s
__device__ __forceinline__ void wm_split16(const float* p, int stride, float s, halo_h16* hi, halo_h16* lo) {
    #pragma unroll
    for (int i = 0; i < 16; i++) {
        float v = p[i * stride] * s;
        _Float16 h = (_Float16)v;
        (*hi)[i] = h;
        (*lo)[i] = (_Float16)(v - (float)h);
    }
}

// acc[j][i] += (W tile rows of this wave) x (token tile j) over one 64-k stage, undoing the scales
__device__ __forceinline__ void wm_mma(const float* Ws, const float* Xs, float sw, float sx, float (*acc)[8]) {
    int wave = threadIdx.x >> 5, lane = threadIdx.x & 31, c = lane & 15;
    int r0 = 16 * (wave & 1), n0 = 32 * (wave >> 1);
    halo_f8 part[2];
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int i = 0; i < 8; i++) part[j][i] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < GT_BK; kk += 16) {
        halo_h16 ah, al;
        wm_split16(Ws + kk * GT_WS + r0 + c, GT_WS, sw, &ah, &al);
        #pragma unroll
        for (int j = 0; j < 2; j++) {
            halo_h16 bh, bl;
            wm_split16(Xs + kk * GT_XS + n0 + 16 * j + c, GT_XS, sx, &bh, &bl);
            part[j] = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(al, bh, part[j]);
            part[j] = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(ah, bl, part[j]);
            part[j] = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(ah, bh, part[j]);
        }
    }
    float undo = 1.0f / (sw * sx);             // a power of two: exact
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int i = 0; i < 8; i++) acc[j][i] += part[j][i] * undo;
}

// the largest |.| this thread wrote into the stage's tiles: gt_load_w's 16 weights and gt_load_x's 32 values
__device__ __forceinline__ float wm_local_max_w(const float* Ws) {
    int t = threadIdx.x, r = t >> 2;
    float m = 0.0f;
    #pragma unroll
    for (int j = 0; j < 2; j++) {
        int gi = (t & 3) + 4 * j;
        #pragma unroll
        for (int i = 0; i < 8; i++) m = fmaxf(m, fabsf(Ws[(8 * gi + i) * GT_WS + r]));
    }
    return m;
}

__device__ __forceinline__ float wm_local_max_x(const float* Xs) {
    int t = threadIdx.x, n = t & 63;
    float m = 0.0f;
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        int k8 = (t >> 6) + 2 * j;
        #pragma unroll
        for (int i = 0; i < 8; i++) m = fmaxf(m, fabsf(Xs[(8 * k8 + i) * GT_XS + n]));
    }
    return m;
}

// (row, token) in the block's tile of element i of this lane's fragment for token tile j
__device__ __forceinline__ int wm_row(int i) { return 16 * ((threadIdx.x >> 5) & 1) + 2 * i + ((threadIdx.x & 31) >> 4); }
__device__ __forceinline__ int wm_tok(int j) { return 32 * (threadIdx.x >> 6) + 16 * j + (threadIdx.x & 15); }
#else
#define HALO_WMMA 0
#endif

// Arguments, grid and block as halo_matmul_gt.
HALO_KERNEL void halo_matmul_wm(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                float* Y, i32 ldy) {
    GRID_DEPENDENCY_SYNC();
#if HALO_WMMA
    __shared__ __align__(16) float Ws[GT_BK * GT_WS];
    __shared__ __align__(16) float Xs[GT_BK * GT_XS];
    __shared__ float red[32];
    int row0 = blockIdx.x * GT_BM, tok0 = blockIdx.y * GT_BN;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rows = base + (size_t)local * rb;
    float acc[2][8];
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int i = 0; i < 8; i++) acc[j][i] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += GT_BK) {
        gt_stage(type, rows, rb, X, xrow, K, T, tok0, k0, Ws, Xs);   // (block_max_abs syncs again before its writes)
        float sw = wm_scale(block_max_abs(wm_local_max_w(Ws), red));
        float sx = wm_scale(block_max_abs(wm_local_max_x(Xs), red));
        wm_mma(Ws, Xs, sw, sx, acc);
    }
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int row = row0 + wm_row(i), tok = tok0 + wm_tok(j);
            if (tok < T) Y[(size_t)tok * ldy + row] = acc[j][i] + (bias ? bias[row] : 0.0f);
        }
#endif
}

// GLU on the same tile: arguments, grid and block as halo_glu_gt.
HALO_KERNEL void halo_glu_wm(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                             i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A) {
    GRID_DEPENDENCY_SYNC();
#if HALO_WMMA
    __shared__ __align__(16) float Wg[GT_BK * GT_WS];
    __shared__ __align__(16) float Wu[GT_BK * GT_WS];
    __shared__ __align__(16) float Xs[GT_BK * GT_XS];
    __shared__ float red[32];
    int row0 = blockIdx.x * GT_BM, tok0 = blockIdx.y * GT_BN;
    const unsigned char* rg = wg + (size_t)row0 * rb_g;
    const unsigned char* ru = wu + (size_t)row0 * rb_u;
    float ag[2][8], au[2][8];
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int i = 0; i < 8; i++) { ag[j][i] = 0.0f; au[j][i] = 0.0f; }
    for (int k0 = 0; k0 < K; k0 += GT_BK) {
        gt_glu_stage(tg, rg, rb_g, tu, ru, rb_u, X, 0, K, T, tok0, k0, Wg, Wu, Xs);
        float sg = wm_scale(block_max_abs(wm_local_max_w(Wg), red));
        float su = wm_scale(block_max_abs(wm_local_max_w(Wu), red));
        float sx = wm_scale(block_max_abs(wm_local_max_x(Xs), red));
        wm_mma(Wg, Xs, sg, sx, ag);
        wm_mma(Wu, Xs, su, sx, au);
    }
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int row = row0 + wm_row(i), tok = tok0 + wm_tok(j);
            if (tok < T) A[(size_t)tok * n_ff + row] = act_fn(ag[j][i], act) * au[j][i];
        }
#endif
}

// ---------------------------------------------------------------------------------------------------------
// Prefill on NVIDIA tensor cores (sm_80 and newer): the gt tile's scheme (each weight dequantized once per 64
// tokens into shared memory) with the products done by mma.sync m16n8k8 TF32 instead of FMAs.
// Precision ("3xTF32"): every operand is split into a TF32 head and a TF32 tail (a = ah + al, both exact in
// 10 mantissa bits) and a*b is taken as al*bh + ah*bl + ah*bh, about 21 bits: float32 tolerances still hold.
// Block: 32 rows x 64 tokens, 32 k per stage. Matmul: 128 threads = 4 warps, warp w owns rows 16 (w & 1) .. +16
// and tokens 32 (w >> 1) .. +32 (four n8 tiles). GLU: 256 threads = 8 warps (half decode the gate tile, half
// the up tile), warp w owns rows 16 (w & 1) .. +16 and tokens 16 (w >> 1) .. +16 of both: half the
// accumulators per thread (72 registers instead of 122), so an SM holds 24 of its warps instead of 16.
// Split-K: block z of gridDim.z sums k in [z kc, (z + 1) kc). With gridDim.z == 1 it writes Y (or A) itself;
// otherwise it writes its partial sums to P ([z][t][row], GLU: [z][gate | up][t][row]) and halo_splitk_sum
// adds them in z order (deterministic, no atomics). Fragment layouts: PTX ISA, "mma.m16n8k8 .tf32".
// Contract (checked on the host): every segment's rows % 32 == 0, kc % 32 == 0, gridDim.z * kc == K.
// HIP (RDNA's WMMA takes only f16/bf16 operands) and older NVIDIA GPUs keep the gt tile; there these kernels
// compile to nothing and the host never launches them.
#define TC_BM 32
#define TC_BN 64
#define TC_BK 32
#define TC_LD (TC_BK + 4)          // row stride in words: the fragment loads of a warp hit 32 distinct banks

#if HALO_TC  // (HALO_TC, tf32_split and mma_tf32: prelude.h)
// The split-K contract's output of one (token, row) for every tensor-core kernel (tc, tcp, tck, tn): the whole sum
// to Y (+ bias) when the grid has one K slice, else this block's slice to P[z][t][row]
__device__ __forceinline__ void tc_out(float* Y, i32 ldy, const float* bias, float* P, int rows_all, int T, int tok,
                                       int row, float v) {
    if (gridDim.z == 1) Y[(size_t)tok * ldy + row] = v + (bias ? bias[row] : 0.0f);
    else P[((size_t)blockIdx.z * T + tok) * rows_all + row] = v;
}

// ... and of a GLU: A = act(gate) * up, else both sums to P's planes [z][gate | up][t][row]
__device__ __forceinline__ void tc_glu_out(float* A, int n_ff, int act, float* P, int T, int tok, int row, float g,
                                           float u) {
    if (gridDim.z == 1) A[(size_t)tok * n_ff + row] = act_fn(g, act) * u;
    else {
        P[((size_t)(2 * blockIdx.z) * T + tok) * n_ff + row] = g;
        P[((size_t)(2 * blockIdx.z + 1) * T + tok) * n_ff + row] = u;
    }
}
__device__ __forceinline__ void st_split8(const float* v, u32* head, u32* tail) {
    u32 h[8], l[8];
    #pragma unroll
    for (int i = 0; i < 8; i++) tf32_split(v[i], &h[i], &l[i]);
    uint4* dh = (uint4*)head; uint4* dl = (uint4*)tail;
    dh[0] = make_uint4(h[0], h[1], h[2], h[3]); dh[1] = make_uint4(h[4], h[5], h[6], h[7]);
    dl[0] = make_uint4(l[0], l[1], l[2], l[3]); dl[1] = make_uint4(l[4], l[5], l[6], l[7]);
}

// W[r][k] for the 32 x 32 weight tile at k0: thread t (< 128) decodes row t / 4, elements 8 (t % 4) .. + 8, so
// four neighbouring lanes read neighbouring bytes of one row (a warp touches 8 rows, not 32 strided ones)
__device__ __forceinline__ void tc_load_w(int type, const unsigned char* rows, int rb, int k0, u32* Wh, u32* Wl,
                                          int t) {
    int r = t >> 2, gi = t & 3;
    float w[8];
    dq8_any(type, rows + (size_t)r * rb, (k0 >> 3) + gi, w);
    st_split8(w, Wh + r * TC_LD + 8 * gi, Wl + r * TC_LD + 8 * gi);
}

// X[n][k] for 64 tokens x 32 k at (tok0, k0), zero past T: 512 float4 over NTH threads, 8 per token row
template <int NTH>
__device__ __forceinline__ void tc_load_x(const float* X, const i32* xrow, int K, int T, int tok0, int k0,
                                          u32* Xh, u32* Xl) {
    #pragma unroll
    for (int j = 0; j < 512 / NTH; j++) {
        int idx = threadIdx.x + NTH * j, n = idx >> 3, c = idx & 7, tok = tok0 + n;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (tok < T) v = *(const float4*)(X + (size_t)(xrow ? xrow[tok] : tok) * K + k0 + 4 * c);
        u32 h[4], l[4];
        tf32_split(v.x, &h[0], &l[0]); tf32_split(v.y, &h[1], &l[1]);
        tf32_split(v.z, &h[2], &l[2]); tf32_split(v.w, &h[3], &l[3]);
        *(uint4*)(Xh + n * TC_LD + 4 * c) = make_uint4(h[0], h[1], h[2], h[3]);
        *(uint4*)(Xl + n * TC_LD + 4 * c) = make_uint4(l[0], l[1], l[2], l[3]);
    }
}

// acc[m][j][e] += this warp's 16 rows (from 16 (warp & 1)) x 8 NJ tokens (from n0) of weight tile m (NM tiles:
// 1, or gate and up) over one 32-k stage (e: the m16n8 accumulator fragment); the token fragments are
// loaded once for all NM tiles.
// The stage's 12 products per tile accumulate in a fresh fragment that is then added to acc with ordinary
// float adds: the tensor cores' own accumulation is not IEEE float32 (on an H200, one chain over K = 2560
// lost ~3e-6 of |X||W|; stage-wise promotion brings it to ~1e-7, below the FMA tile's ~3e-7).
template <int NM, int NJ>
__device__ __forceinline__ void tc_mma(const u32* const* Wh, const u32* const* Wl, const u32* Xh, const u32* Xl,
                                       int n0, float (*acc)[NJ][4]) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    int m0 = 16 * (warp & 1);
    float part[NM][NJ][4];
    #pragma unroll
    for (int m = 0; m < NM; m++)
        #pragma unroll
        for (int j = 0; j < NJ; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) part[m][j][e] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < TC_BK; kk += 8) {
        int i0 = (m0 + g) * TC_LD + kk + q, i1 = i0 + 8 * TC_LD;
        u32 ah[NM][4], al[NM][4];
        #pragma unroll
        for (int m = 0; m < NM; m++) {
            ah[m][0] = Wh[m][i0]; ah[m][1] = Wh[m][i1]; ah[m][2] = Wh[m][i0 + 4]; ah[m][3] = Wh[m][i1 + 4];
            al[m][0] = Wl[m][i0]; al[m][1] = Wl[m][i1]; al[m][2] = Wl[m][i0 + 4]; al[m][3] = Wl[m][i1 + 4];
        }
        #pragma unroll
        for (int j = 0; j < NJ; j++) {
            int b = (n0 + 8 * j + g) * TC_LD + kk + q;
            u32 bh0 = Xh[b], bh1 = Xh[b + 4], bl0 = Xl[b], bl1 = Xl[b + 4];
            #pragma unroll
            for (int m = 0; m < NM; m++) {
                mma_tf32(part[m][j], al[m], bh0, bh1);
                mma_tf32(part[m][j], ah[m], bl0, bl1);
                mma_tf32(part[m][j], ah[m], bh0, bh1);
            }
        }
    }
    #pragma unroll
    for (int m = 0; m < NM; m++)
        #pragma unroll
        for (int j = 0; j < NJ; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] += part[m][j][e];
}

// (row in the tile, token in the tile) of accumulator e of n8 tile j for this lane; n0: the warp's first token
__device__ __forceinline__ int tc_row(int e) { return 16 * ((threadIdx.x >> 5) & 1) + ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int tc_tok(int n0, int j, int e) { return n0 + 8 * j + 2 * (threadIdx.x & 3) + (e & 1); }
#endif

HALO_KERNEL void halo_matmul_tc(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                float* Y, i32 ldy, i32 kc, float* P) {
    GRID_DEPENDENCY_SYNC();
#if HALO_TC
    __shared__ __align__(16) u32 Wh[TC_BM * TC_LD];
    __shared__ __align__(16) u32 Wl[TC_BM * TC_LD];
    __shared__ __align__(16) u32 Xh[TC_BN * TC_LD];
    __shared__ __align__(16) u32 Xl[TC_BN * TC_LD];
    int row0 = blockIdx.x * TC_BM, tok0 = blockIdx.y * TC_BN, z = blockIdx.z, rows_all = n0 + n1 + n2;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rows = base + (size_t)local * rb;
    const u32* wh[1] = {Wh}; const u32* wl[1] = {Wl};
    int n0w = 32 * (threadIdx.x >> 6);            // 4 warps: 2 (rows) x 2 (32 tokens each)
    float acc[1][4][4];
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) acc[0][j][e] = 0.0f;
    for (int k0 = z * kc; k0 < (z + 1) * kc; k0 += TC_BK) {
        __syncthreads();
        tc_load_w(type, rows, rb, k0, Wh, Wl, threadIdx.x);
        tc_load_x<128>(X, xrow, K, T, tok0, k0, Xh, Xl);
        __syncthreads();
        tc_mma<1, 4>(wh, wl, Xh, Xl, n0w, acc);
    }
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tc_row(e), tok = tok0 + tc_tok(n0w, j, e);
            if (tok >= T) continue;
            tc_out(Y, ldy, bias, P, rows_all, T, tok, row, acc[0][j][e]);
        }
#endif
}

// launch bounds: three 256-thread blocks per SM (<= 85 registers; unbounded, nvcc takes 86 and fits only two)
HALO_KERNEL __launch_bounds__(256, 3) void halo_glu_tc(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                             i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 kc, float* P) {
    GRID_DEPENDENCY_SYNC();
#if HALO_TC
    __shared__ __align__(16) u32 Gh[TC_BM * TC_LD];
    __shared__ __align__(16) u32 Gl[TC_BM * TC_LD];
    __shared__ __align__(16) u32 Uh[TC_BM * TC_LD];
    __shared__ __align__(16) u32 Ul[TC_BM * TC_LD];
    __shared__ __align__(16) u32 Xh[TC_BN * TC_LD];
    __shared__ __align__(16) u32 Xl[TC_BN * TC_LD];
    int row0 = blockIdx.x * TC_BM, tok0 = blockIdx.y * TC_BN, z = blockIdx.z;
    const unsigned char* rg = wg + (size_t)row0 * rb_g;
    const unsigned char* ru = wu + (size_t)row0 * rb_u;
    const u32* wh[2] = {Gh, Uh}; const u32* wl[2] = {Gl, Ul};
    int n0w = 16 * (threadIdx.x >> 6);            // 8 warps: 2 (rows) x 4 (16 tokens each)
    float acc[2][2][4];                            // [gate | up][n8 tile][fragment]
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) { acc[0][j][e] = 0.0f; acc[1][j][e] = 0.0f; }
    for (int k0 = z * kc; k0 < (z + 1) * kc; k0 += TC_BK) {
        __syncthreads();
        if (threadIdx.x < 128) tc_load_w(tg, rg, rb_g, k0, Gh, Gl, threadIdx.x);      // warps 0-3: gate
        else tc_load_w(tu, ru, rb_u, k0, Uh, Ul, threadIdx.x - 128);                 // warps 4-7: up
        tc_load_x<256>(X, 0, K, T, tok0, k0, Xh, Xl);
        __syncthreads();
        tc_mma<2, 2>(wh, wl, Xh, Xl, n0w, acc);
    }
    #pragma unroll
    for (int j = 0; j < 2; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tc_row(e), tok = tok0 + tc_tok(n0w, j, e);
            if (tok >= T) continue;
            tc_glu_out(A, n_ff, act, P, T, tok, row, acc[0][j][e], acc[1][j][e]);
        }
#endif
}

// ---------------------------------------------------------------------------------------------------------
// Pipelined tensor-core tile "tcp" (CUDA sm_80+): the tc tile's arithmetic (3xTF32, stage-wise promotion, same
// split-K contract and partial-sum layout) with the memory side reworked:
// - 64 weight rows x 64 tokens per 128-thread block (GLU: 32 gate + 32 up rows), each warp 32 rows x 32 tokens,
//   so every fragment feeds more MMAs (the tc warp had 16 x 32);
// - activations go global -> shared memory as raw float32 with 16-byte cp.async, one stage ahead (double buffer),
//   and are split into TF32 head + tail in registers as the fragments are loaded;
// - the weight tile of the next stage is fetched into registers before this stage's MMAs (Q4_K: one 16-byte header
//   and one 8-byte quant load per 8 weights; Q6_K: aligned words funnel-shifted) and dequantized after them, so the
//   global latency overlaps the MMAs; other types dequantize with dq8 after the MMAs as tc does;
// - shared memory is laid out for wide fragment loads: within each 8-k chunk MMA slot q takes k = 2q and slot q + 4
//   k = 2q + 1 (a relabelling of the sum's terms, the same for both operands), so a lane reads its two B values
//   with one 8-byte load and its A head and tail pairs with one 16-byte load per row ({h(2q), h(2q+1), l(2q),
//   l(2q+1)}); row strides 80 and 40 words keep both conflict-free.
// Contract (host): matmul segments rows % 64 == 0, GLU n_ff % 32 == 0; kc % 32 == 0; gridDim.z * kc == K.
#define TP_BM 64
#define TP_BN 64
#define TP_BK 32
#define TP_LDW 80                  // words per weight row: 32 k x (head, tail) + 16 pad
#define TP_LDX 40                  // words per token row: 32 k + 8 pad

#if HALO_TC
// X[tok0 + n][k0 .. k0 + 32) into Xs[n * TP_LDX ..]: thread t copies chunks c = t % 8 of token rows t / 8 + 16 j;
// xo[j]: the row's element offset in X, or -1 past T
__device__ __forceinline__ void tp_load_x(const float* X, const int* xo, int k0, float* Xs) {
    int t = threadIdx.x, c = t & 7;
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        int n = (t >> 3) + 16 * j;
        const float* src = xo[j] >= 0 ? X + (size_t)xo[j] + k0 + 4 * c : X;
        cp_async16(Xs + n * TP_LDX + 4 * c, src, xo[j] >= 0 ? 16 : 0);
    }
}

// Raw bytes of elements 8 gi .. 8 gi + 7 of the 32-k stage at k0 of one weight row, into registers (K-quants;
// other types fetch nothing here and decode in tp_convert)
__device__ __forceinline__ void tp_fetch(int type, const unsigned char* rp, int k0, int gi, u32* raw) {
    if (type == T_Q4_K) {
        const unsigned char* b = rp + (size_t)(k0 >> 8) * 144;
        int e = (k0 & 255) + 8 * gi;
        uint4 hdr = __ldg((const uint4*)b);
        uint2 q = __ldg((const uint2*)(b + 16 + 32 * (e >> 6) + (e & 31)));
        raw[0] = hdr.x; raw[1] = hdr.y; raw[2] = hdr.z; raw[3] = hdr.w; raw[4] = q.x; raw[5] = q.y;
    } else if (type == T_Q6_K) {
        const unsigned char* b = rp + (size_t)(k0 >> 8) * 210;             // 2-byte aligned
        int e = (k0 & 255) + 8 * gi, hh = e >> 7, r = e & 127, l = r & 31;
        const u32* ql = (const u32*)(((size_t)(b + 64 * hh + 32 * ((r >> 5) & 1) + l)) & ~(size_t)3);
        const u32* qh = (const u32*)(((size_t)(b + 128 + 32 * hh + l)) & ~(size_t)3);
        raw[0] = __ldg(ql); raw[1] = __ldg(ql + 1); raw[2] = __ldg(ql + 2);
        raw[3] = __ldg(qh); raw[4] = __ldg(qh + 1); raw[5] = __ldg(qh + 2);
        raw[6] = ld_u8(b + 192 + (e >> 4)) | (ld_u16(b + 208) << 16);      // int8 scale | float16 d
        raw[7] = (u32)((size_t)b & 3) * 8u;                                 // the words' byte shift
    }
}

// The 8 weights of tp_fetch's raw bytes (bit-identical to dq8)
__device__ __forceinline__ void tp_convert(int type, const unsigned char* rp, int k0, int gi, const u32* raw, float* w) {
    if (type == T_Q4_K) {
        int e = (k0 & 255) + 8 * gi, h = (e >> 5) & 1;
        float d = half_to_float(raw[0] & 0xffffu), dmin = half_to_float(raw[0] >> 16), sc, mn;
        scale_min_k4_reg(e >> 5, raw[1], raw[2], raw[3], &sc, &mn);
        float dl = d * sc, ml = dmin * mn;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            u32 v = (raw[4 + (i >> 2)] >> (8 * (i & 3) + 4 * h)) & 15u;
            w[i] = dl * (float)v - ml;
        }
    } else if (type == T_Q6_K) {
        int e = (k0 & 255) + 8 * gi, k = (e & 127) >> 5;
        u32 sh = raw[7];
        u32 ql[2] = {(u32)(((((u64)raw[1]) << 32) | raw[0]) >> sh), (u32)(((((u64)raw[2]) << 32) | raw[1]) >> sh)};
        u32 qh[2] = {(u32)(((((u64)raw[4]) << 32) | raw[3]) >> sh), (u32)(((((u64)raw[5]) << 32) | raw[4]) >> sh)};
        float dl = half_to_float(raw[6] >> 16) * (float)(signed char)(raw[6] & 255u);
        int sl = 4 * (k >> 1), shh = 2 * k;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            u32 bl = ql[i >> 2] >> (8 * (i & 3)), bh = qh[i >> 2] >> (8 * (i & 3));
            int v = (int)(((bl >> sl) & 15u) | (((bh >> shh) & 3u) << 4)) - 32;
            w[i] = dl * (float)v;
        }
    } else {
        dq8_any(type, rp, (k0 >> 3) + gi, w);
    }
}

// 8 weights (k = 8 gi .. + 7 of a row) as TF32 (head, tail) pairs: {h(k), h(k + 1), l(k), l(k + 1)} per even k
__device__ __forceinline__ void tp_store_w(const float* w, u32* dst) {
    #pragma unroll
    for (int p = 0; p < 4; p++) {
        u32 h0, l0, h1, l1;
        tf32_split(w[2 * p], &h0, &l0);
        tf32_split(w[2 * p + 1], &h1, &l1);
        *(uint4*)(dst + 4 * p) = make_uint4(h0, h1, l0, l1);
    }
}

// acc[m][j][e] += rows (m ? mr1 : mr0) + 0..15 x tokens n0 + 8 j + 0..7 over one 32-k stage (3xTF32; the stage's
// products accumulate in a fresh fragment added to acc with float adds, as tc_mma)
__device__ __forceinline__ void tp_mma(const u32* Ws, const float* Xs, int mr0, int mr1, int n0, float (*acc)[4][4]) {
    int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    float part[2][4][4];
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) part[m][j][e] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < TP_BK; kk += 8) {
        u32 ah[2][4], al[2][4];
        #pragma unroll
        for (int m = 0; m < 2; m++) {
            const u32* p = Ws + ((m ? mr1 : mr0) + g) * TP_LDW + 2 * kk + 4 * q;
            uint4 r0 = *(const uint4*)p, r1 = *(const uint4*)(p + 8 * TP_LDW);
            ah[m][0] = r0.x; ah[m][1] = r1.x; ah[m][2] = r0.y; ah[m][3] = r1.y;
            al[m][0] = r0.z; al[m][1] = r1.z; al[m][2] = r0.w; al[m][3] = r1.w;
        }
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            float2 b = *(const float2*)(Xs + (n0 + 8 * j + g) * TP_LDX + kk + 2 * q);
            u32 bh0, bl0, bh1, bl1;
            tf32_split(b.x, &bh0, &bl0);
            tf32_split(b.y, &bh1, &bl1);
            #pragma unroll
            for (int m = 0; m < 2; m++) {
                mma_tf32(part[m][j], al[m], bh0, bh1);
                mma_tf32(part[m][j], ah[m], bl0, bl1);
                mma_tf32(part[m][j], ah[m], bh0, bh1);
            }
        }
    }
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] += part[m][j][e];
}

// The k loop shared by matmul and GLU: weight rows r0p (tile rows t / 4) and r1p (tile rows 32 + t / 4), types ty0 /
// ty1; X rows xo (tp_load_x); this block's k range [kbeg, kbeg + kc)
__device__ __forceinline__ void tp_loop(const unsigned char* r0p, int ty0, const unsigned char* r1p, int ty1,
                                        const float* X, const int* xo, int kbeg, int kc, int mr0, int mr1, int n0,
                                        u32* Ws, float* Xs0, float* Xs1, float (*acc)[4][4]) {
    int t = threadIdx.x, gi = t & 3, r = t >> 2;
    u32* w0s = Ws + r * TP_LDW + 16 * gi;
    u32* w1s = Ws + (r + 32) * TP_LDW + 16 * gi;
    u32 raw0[8], raw1[8];
    float w[8];
    tp_load_x(X, xo, kbeg, Xs0);
    cp_async_commit();
    tp_fetch(ty0, r0p, kbeg, gi, raw0);
    tp_fetch(ty1, r1p, kbeg, gi, raw1);
    tp_convert(ty0, r0p, kbeg, gi, raw0, w);
    tp_store_w(w, w0s);
    tp_convert(ty1, r1p, kbeg, gi, raw1, w);
    tp_store_w(w, w1s);
    cp_async_wait_all();
    __syncthreads();
    int nst = kc / TP_BK;
    for (int s = 0; s < nst; s++) {
        int k1 = kbeg + TP_BK * (s + 1);
        bool more = s + 1 < nst;
        float* cur = (s & 1) ? Xs1 : Xs0;
        if (more) {
            tp_load_x(X, xo, k1, (s & 1) ? Xs0 : Xs1);
            tp_fetch(ty0, r0p, k1, gi, raw0);
            tp_fetch(ty1, r1p, k1, gi, raw1);
        }
        cp_async_commit();
        tp_mma(Ws, cur, mr0, mr1, n0, acc);
        __syncthreads();                               // every warp is done with Ws
        if (more) {
            tp_convert(ty0, r0p, k1, gi, raw0, w);
            tp_store_w(w, w0s);
            tp_convert(ty1, r1p, k1, gi, raw1, w);
            tp_store_w(w, w1s);
        }
        cp_async_wait_all();
        __syncthreads();
    }
}

// (row in the tile, token in the tile) of accumulator e of n8 tile j for this lane, m16 tile at mr, tokens from n0
__device__ __forceinline__ int tp_row(int mr, int e) { return mr + ((threadIdx.x & 31) >> 2) + 8 * (e >> 1); }
__device__ __forceinline__ int tp_tok(int n0, int j, int e) { return n0 + 8 * j + 2 * (threadIdx.x & 3) + (e & 1); }

// tp_loop's accumulators, zeroed: [m16 tile (GLU: gate | up)][n8 tile][fragment]
__device__ __forceinline__ void tp_zero(float (*acc)[4][4]) {
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] = 0.0f;
}

// X row offsets of this thread's 4 token rows (tp_load_x), -1 past T
__device__ __forceinline__ void tp_x_rows(const i32* xrow, int K, int T, int tok0, int* xo) {
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        int tok = tok0 + (threadIdx.x >> 3) + 16 * j;
        xo[j] = tok < T ? (xrow ? xrow[tok] : tok) * K : -1;
    }
}
#endif

HALO_KERNEL __launch_bounds__(128) void halo_matmul_tcp(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                 const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                 const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                 const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                 float* Y, i32 ldy, i32 kc, float* P) {
    GRID_DEPENDENCY_SYNC();
#if HALO_TC
    __shared__ __align__(16) u32 Ws[TP_BM * TP_LDW];
    __shared__ __align__(16) float Xs0[TP_BN * TP_LDX];
    __shared__ __align__(16) float Xs1[TP_BN * TP_LDX];
    int row0 = blockIdx.x * TP_BM, tok0 = blockIdx.y * TP_BN, z = blockIdx.z, rows_all = n0 + n1 + n2;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rows = base + (size_t)local * rb;
    int warp = threadIdx.x >> 5, mr0 = 32 * (warp & 1), nw = 32 * (warp >> 1);
    int xo[4];
    tp_x_rows(xrow, K, T, tok0, xo);
    float acc[2][4][4];
    tp_zero(acc);
    int r = threadIdx.x >> 2;
    tp_loop(rows + (size_t)r * rb, type, rows + (size_t)(r + 32) * rb, type, X, xo, z * kc, kc, mr0, mr0 + 16, nw,
            Ws, Xs0, Xs1, acc);
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = row0 + tp_row(mr0 + 16 * m, e), tok = tok0 + tp_tok(nw, j, e);
                if (tok >= T) continue;
                tc_out(Y, ldy, bias, P, rows_all, T, tok, row, acc[m][j][e]);
            }
#endif
}

// GLU: block rows row0 .. row0 + 31 of gate (tile rows 0-31) and of up (tile rows 32-63); warp w takes rows
// 16 (w & 1) of both, so each lane holds gate and up of the same outputs
HALO_KERNEL __launch_bounds__(128) void halo_glu_tcp(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu,
                              i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 kc,
                              float* P) {
    GRID_DEPENDENCY_SYNC();
#if HALO_TC
    __shared__ __align__(16) u32 Ws[TP_BM * TP_LDW];
    __shared__ __align__(16) float Xs0[TP_BN * TP_LDX];
    __shared__ __align__(16) float Xs1[TP_BN * TP_LDX];
    int row0 = blockIdx.x * (TP_BM / 2), tok0 = blockIdx.y * TP_BN, z = blockIdx.z;
    int warp = threadIdx.x >> 5, mr0 = 16 * (warp & 1), nw = 32 * (warp >> 1);
    int xo[4];
    tp_x_rows(0, K, T, tok0, xo);
    float acc[2][4][4];                            // [gate | up][n8 tile][fragment]
    tp_zero(acc);
    int r = row0 + (threadIdx.x >> 2);
    tp_loop(wg + (size_t)r * rb_g, tg, wu + (size_t)r * rb_u, tu, X, xo, z * kc, kc, mr0, mr0 + 32, nw,
            Ws, Xs0, Xs1, acc);
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tp_row(mr0, e), tok = tok0 + tp_tok(nw, j, e);
            if (tok >= T) continue;
            tc_glu_out(A, n_ff, act, P, T, tok, row, acc[0][j][e], acc[1][j][e]);
        }
#endif
}

// ---------------------------------------------------------------------------------------------------------
// "tck": the tcp tile for matrices whose every row is Q4_K or Q6_K (the K-quants Qwen3-style Q4_K_M files are
// made of). Their weights are integers times per-sub-block float scales: Q4_K w = (d sc) q - (dmin m) with q in
// 0..15 per 32 elements, Q6_K w = (d sc) (q - 32) with q - 32 in -32..31 per 16. The integer parts are exact in
// TF32, so only the activation needs the head + tail split: 2 MMAs per product instead of 3. The products of
// each 16-k half stage accumulate in a fresh fragment that is scaled by the row's sub-block scale when added to
// the float32 accumulators; Q4_K's min term subtracts (dmin m) times the stage's sum of the activations (a tree
// sum over 32 elements in float32). The weight tile is half the bytes of tcp's, so it is double-buffered too:
// one barrier per 32-k stage. Same grid, split-K contract and partial sums as tcp. Three blocks per SM
// (__launch_bounds__, <= 168 registers, a few bytes spilled) where 176 registers allowed two: H200, 4B matmuls
// at 512 tokens 119.5 -> 113.9 ms per 36 layers, at 128 unchanged.
#define TK_LDW 40                  // words per weight row: 32 integer weights + 8 pad (8-byte loads conflict-free)

#if HALO_TC
// The 8 integer weights of tp_fetch's raw bytes, and their row's scales: sc0 (first 16 k of the stage), sc1
// (second 16), mn (Q4_K min, subtracted times the activation sum; 0 for Q6_K)
__device__ __forceinline__ void tk_convert(int type, int k0, int gi, const u32* raw, float* w, float* sc, float* mn) {
    int e = (k0 & 255) + 8 * gi;
    if (type == T_Q4_K) {
        int h = (e >> 5) & 1;
        float d = half_to_float(raw[0] & 0xffffu), dmin = half_to_float(raw[0] >> 16), s, m;
        scale_min_k4_reg(e >> 5, raw[1], raw[2], raw[3], &s, &m);
        *sc = d * s; *mn = dmin * m;
        #pragma unroll
        for (int i = 0; i < 8; i++) w[i] = (float)((raw[4 + (i >> 2)] >> (8 * (i & 3) + 4 * h)) & 15u);
    } else {                                          // T_Q6_K
        int k = (e & 127) >> 5;
        u32 sh = raw[7];
        u32 ql[2] = {(u32)(((((u64)raw[1]) << 32) | raw[0]) >> sh), (u32)(((((u64)raw[2]) << 32) | raw[1]) >> sh)};
        u32 qh[2] = {(u32)(((((u64)raw[4]) << 32) | raw[3]) >> sh), (u32)(((((u64)raw[5]) << 32) | raw[4]) >> sh)};
        *sc = half_to_float(raw[6] >> 16) * (float)(signed char)(raw[6] & 255u);
        *mn = 0.0f;
        int sl = 4 * (k >> 1), shh = 2 * k;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            u32 bl = ql[i >> 2] >> (8 * (i & 3)), bh = qh[i >> 2] >> (8 * (i & 3));
            w[i] = (float)((int)(((bl >> sl) & 15u) | (((bh >> shh) & 3u) << 4)) - 32);
        }
    }
}

// Weights of item (tile row r, group gi) and the row's scales {sc of k 0-15, sc of k 16-31, mn, 0} into the stage
// buffers: a Q4_K row's scales come from its gi 0 thread, a Q6_K row's from gi 0 (first 16 k) and gi 2 (second)
__device__ __forceinline__ void tk_store(int type, int k0, int gi, const u32* raw, u32* ws, float* sc4) {
    float w[8], sc, mn;
    tk_convert(type, k0, gi, raw, w, &sc, &mn);
    *(uint4*)ws = make_uint4(__float_as_uint(w[0]), __float_as_uint(w[1]), __float_as_uint(w[2]), __float_as_uint(w[3]));
    *(uint4*)(ws + 4) = make_uint4(__float_as_uint(w[4]), __float_as_uint(w[5]), __float_as_uint(w[6]),
                                   __float_as_uint(w[7]));
    if (gi == 0) { sc4[0] = sc; sc4[2] = mn; }
    if (gi == (type == T_Q4_K ? 0 : 2)) sc4[1] = sc;
}

// acc[m][j][e] += one 32-k stage of rows (m ? mr1 : mr0) + 0..15 x tokens n0 + 8 j + 0..7, integer weights Ws
// (row stride TK_LDW, pairs as in tcp: slot q <-> k 2q, slot q + 4 <-> k 2q + 1), scales Sc (float4 per row)
__device__ __forceinline__ void tk_mma(const u32* Ws, const float* Sc, const float* Xs, int mr0, int mr1, int n0,
                                       float (*acc)[4][4]) {
    int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    float part[2][4][4], sx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    #pragma unroll
    for (int half = 0; half < 2; half++) {
        #pragma unroll
        for (int m = 0; m < 2; m++)
            #pragma unroll
            for (int j = 0; j < 4; j++)
                #pragma unroll
                for (int e = 0; e < 4; e++) part[m][j][e] = 0.0f;
        #pragma unroll
        for (int kk = 16 * half; kk < 16 * half + 16; kk += 8) {
            u32 a[2][4];
            #pragma unroll
            for (int m = 0; m < 2; m++) {
                const u32* p = Ws + ((m ? mr1 : mr0) + g) * TK_LDW + kk + 2 * q;
                uint2 r0 = *(const uint2*)p, r1 = *(const uint2*)(p + 8 * TK_LDW);
                a[m][0] = r0.x; a[m][1] = r1.x; a[m][2] = r0.y; a[m][3] = r1.y;
            }
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                float2 b = *(const float2*)(Xs + (n0 + 8 * j + g) * TP_LDX + kk + 2 * q);
                sx[j] += b.x + b.y;
                u32 bh0, bl0, bh1, bl1;
                tf32_split(b.x, &bh0, &bl0);
                tf32_split(b.y, &bh1, &bl1);
                #pragma unroll
                for (int m = 0; m < 2; m++) {
                    mma_tf32(part[m][j], a[m], bl0, bl1);
                    mma_tf32(part[m][j], a[m], bh0, bh1);
                }
            }
        }
        #pragma unroll
        for (int m = 0; m < 2; m++) {
            int r = (m ? mr1 : mr0) + g;
            float s0 = Sc[4 * r + half], s1 = Sc[4 * (r + 8) + half];
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                acc[m][j][0] = fmaf(s0, part[m][j][0], acc[m][j][0]);
                acc[m][j][1] = fmaf(s0, part[m][j][1], acc[m][j][1]);
                acc[m][j][2] = fmaf(s1, part[m][j][2], acc[m][j][2]);
                acc[m][j][3] = fmaf(s1, part[m][j][3], acc[m][j][3]);
            }
        }
    }
    // Q4_K's min: acc -= mn[row] * sum of the stage's 32 activations of the token. Lane (g, q) holds 8 of token
    // n0 + 8 j + g's; the 4 lanes of g add theirs, then each lane takes its columns 2q, 2q + 1 from lanes 8q, 8q + 4.
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        float s = sx[j];
        s += SHFL_XOR(s, 1);
        s += SHFL_XOR(s, 2);
        float c0 = __shfl_sync(0xffffffffu, s, 8 * q), c1 = __shfl_sync(0xffffffffu, s, 8 * q + 4);
        #pragma unroll
        for (int m = 0; m < 2; m++) {
            int r = (m ? mr1 : mr0) + g;
            float m0 = Sc[4 * r + 2], m1 = Sc[4 * (r + 8) + 2];
            acc[m][j][0] = fmaf(-m0, c0, acc[m][j][0]);
            acc[m][j][1] = fmaf(-m0, c1, acc[m][j][1]);
            acc[m][j][2] = fmaf(-m1, c0, acc[m][j][2]);
            acc[m][j][3] = fmaf(-m1, c1, acc[m][j][3]);
        }
    }
}

// tp_loop for tck: weight tiles and scales double-buffered, one barrier per stage
__device__ __forceinline__ void tk_loop(const unsigned char* r0p, int ty0, const unsigned char* r1p, int ty1,
                                        const float* X, const int* xo, int kbeg, int kc, int mr0, int mr1, int n0,
                                        u32* Ws0, u32* Ws1, float* Sc0, float* Sc1, float* Xs0, float* Xs1,
                                        float (*acc)[4][4]) {
    int t = threadIdx.x, gi = t & 3, r = t >> 2;
    int w0o = r * TK_LDW + 8 * gi, w1o = (r + 32) * TK_LDW + 8 * gi;
    u32 raw0[8], raw1[8];
    tp_load_x(X, xo, kbeg, Xs0);
    cp_async_commit();
    tp_fetch(ty0, r0p, kbeg, gi, raw0);
    tp_fetch(ty1, r1p, kbeg, gi, raw1);
    tk_store(ty0, kbeg, gi, raw0, Ws0 + w0o, Sc0 + 4 * r);
    tk_store(ty1, kbeg, gi, raw1, Ws0 + w1o, Sc0 + 4 * (r + 32));
    cp_async_wait_all();
    __syncthreads();
    int nst = kc / TP_BK;
    for (int s = 0; s < nst; s++) {
        int k1 = kbeg + TP_BK * (s + 1);
        bool more = s + 1 < nst, odd = s & 1;
        if (more) {
            tp_load_x(X, xo, k1, odd ? Xs0 : Xs1);
            tp_fetch(ty0, r0p, k1, gi, raw0);
            tp_fetch(ty1, r1p, k1, gi, raw1);
        }
        cp_async_commit();
        tk_mma(odd ? Ws1 : Ws0, odd ? Sc1 : Sc0, odd ? Xs1 : Xs0, mr0, mr1, n0, acc);
        if (more) {                                    // the other buffers: last read before the previous barrier
            u32* wn = odd ? Ws0 : Ws1;
            float* sn = odd ? Sc0 : Sc1;
            tk_store(ty0, k1, gi, raw0, wn + w0o, sn + 4 * r);
            tk_store(ty1, k1, gi, raw1, wn + w1o, sn + 4 * (r + 32));
        }
        cp_async_wait_all();
        __syncthreads();
    }
}
#endif

#if HALO_TC
// The tck kernels' shared memory and k loop
__device__ __forceinline__ void tk_run(const unsigned char* r0p, int ty0, const unsigned char* r1p, int ty1,
                                       const float* X, const int* xo, int kbeg, int kc, int mr0, int mr1, int n0,
                                       float (*acc)[4][4]) {
    __shared__ __align__(16) u32 Ws0[TP_BM * TK_LDW];
    __shared__ __align__(16) u32 Ws1[TP_BM * TK_LDW];
    __shared__ __align__(16) float Sc0[TP_BM * 4];
    __shared__ __align__(16) float Sc1[TP_BM * 4];
    __shared__ __align__(16) float Xs[2 * TP_BN * TP_LDX];
    tp_zero(acc);
    tk_loop(r0p, ty0, r1p, ty1, X, xo, kbeg, kc, mr0, mr1, n0, Ws0, Ws1, Sc0, Sc1, Xs, Xs + TP_BN * TP_LDX, acc);
}

__device__ __forceinline__ void tk_matmul(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                          const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                          const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                          const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                          float* Y, i32 ldy, i32 kc, float* P) {
    int row0 = blockIdx.x * TP_BM, tok0 = blockIdx.y * TP_BN, z = blockIdx.z, rows_all = n0 + n1 + n2;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rows = base + (size_t)local * rb;
    int warp = threadIdx.x >> 5, mr0 = 32 * (warp & 1), nw = 32 * (warp >> 1);
    int xo[4];
    tp_x_rows(xrow, K, T, tok0, xo);
    float acc[2][4][4];
    int r = threadIdx.x >> 2;
    tk_run(rows + (size_t)r * rb, type, rows + (size_t)(r + 32) * rb, type, X, xo, z * kc, kc, mr0, mr0 + 16, nw, acc);
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = row0 + tp_row(mr0 + 16 * m, e), tok = tok0 + tp_tok(nw, j, e);
                if (tok >= T) continue;
                tc_out(Y, ldy, bias, P, rows_all, T, tok, row, acc[m][j][e]);
            }
}

// GLU: rows row0 .. row0 + 31 of gate (tile rows 0-31) and of up (32-63), as tcp
__device__ __forceinline__ void tk_glu(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                                       i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 kc,
                                       float* P) {
    int row0 = blockIdx.x * (TP_BM / 2), tok0 = blockIdx.y * TP_BN, z = blockIdx.z;
    int warp = threadIdx.x >> 5, mr0 = 16 * (warp & 1), nw = 32 * (warp >> 1);
    int xo[4];
    tp_x_rows(0, K, T, tok0, xo);
    float acc[2][4][4];
    int r = row0 + (threadIdx.x >> 2);
    tk_run(wg + (size_t)r * rb_g, tg, wu + (size_t)r * rb_u, tu, X, xo, z * kc, kc, mr0, mr0 + 32, nw, acc);
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tp_row(mr0, e), tok = tok0 + tp_tok(nw, j, e);
            if (tok >= T) continue;
            tc_glu_out(A, n_ff, act, P, T, tok, row, acc[0][j][e], acc[1][j][e]);
        }
}
#define TK_BODY(call) call
#else
#define TK_BODY(call)
#endif

HALO_KERNEL __launch_bounds__(128, 3) void halo_matmul_tck(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                 const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                 const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                 const float* bias, const float* X, const i32* xrow, i32 K, i32 T,
                                 float* Y, i32 ldy, i32 kc, float* P) {
    GRID_DEPENDENCY_SYNC();
    TK_BODY(tk_matmul(w0, t0_, n0, rb0, w1, t1_, n1, rb1, w2, t2_, n2, rb2, bias, X, xrow, K, T, Y, ldy, kc, P));
}

HALO_KERNEL __launch_bounds__(128, 3) void halo_glu_tck(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu,
                              i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 kc,
                              float* P) {
    GRID_DEPENDENCY_SYNC();
    TK_BODY(tk_glu(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, T, A, kc, P));
}

// ---------------------------------------------------------------------------------------------------------
// "tch" (CUDA sm_80+): tck's integer weights on f16 tensor cores, mma.m16n8k16 with float32 accumulators, with the
// ALU work taken out of the k loop (tck spent its issue slots on TF32 splits of the activations per fragment):
// - halo_split_f16, a pre-pass once per distinct input, writes X (T x K float32, rows through xrow) as f16 heads Xh
//   and tails Xl of x / 2^e[t]: e[t] per token, a power of two that puts the token's max |x| in [2^14, 2^15) (exact
//   both ways; heads and tails in f16 range, x / 2^e = head + tail to ~2^-22 of the token's max), and per (32-k
//   sub-block, token) the sum of x / 2^e (Q4_K's min term, th_min's B operand) over 32, < 2^15, as an f16 head and
//   tail: S[super-block][t][16], row stride ls (T rounded up to 128, a multiple of any tile's NB), the 8 sub-blocks'
//   heads then their tails (32 bytes a token: one 16-byte copy each);
// - the tile copies Xh / Xl into shared memory with cp.async (double-buffered) and loads its B fragments with
//   ldmatrix; the weights enter as their integer codes (Q4_K s q with its 6-bit sub-block scale s, Q6_K q - 32:
//   exact in f16), converted once per block from tp_fetch's raw bytes (two codes per f16x2 op: 0x6400 | q minus 1024
//   or 1056) into shared memory, A fragments by ldmatrix. 2 MMAs per product (w xh + w xl), each of k16. Tiles of
//   32 f16 per row, unpadded, their 16-byte chunks swizzled (th_sw) so ldmatrix is conflict-free.
// Accuracy as tck: each sub-block's products go into a fresh fragment that is scaled when added to the float32
// accumulators (Q6_K: 16 k, 2 MMAs, times d sc; Q4_K: 32 k, 4 MMAs, times d, its 6-bit scale folded into the codes),
// Q4_K's min subtracts dmin x (sum over a super-block's sub-blocks of m x the sub-block's activation sum), one MMA
// per super-block (th_min); the output is scaled back by 2^e[t] (exact).
// Rows, split-K contract and partial sums as tck: 64 rows (GLU: 32 gate + 32 up) x NB tokens per block, warps of 32
// rows x 32 tokens, 32-k stages; kc % 32 == 0, gridDim.z * kc == K, ls % NB == 0 and ls >= T. NB is a template
// parameter: 64 (halo_*_tch: 128 threads, each decoding two weight rows, four blocks per SM in 29 KB of static
// shared memory) or 128 (halo_*_tch128: 256 threads, one row each, so each weight tile is decoded once per 128
// tokens; two blocks per SM in 47 KB). Threads 2 NB = NB / 16 warps (2 row groups x NB / 32 token groups); at most
// 128 registers, no spills.

HALO_KERNEL void halo_split_f16(const float* X, const i32* xrow, i32 K, i32 T, i32 ls, unsigned short* Xh,
                                unsigned short* Xl, unsigned short* S, i32* E) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32];
    int t = blockIdx.x, src = xrow ? xrow[t] : t;
    int n4 = K >> 2;                                  // K % 32 == 0
    if (src < 0) {                                    // a row of no input (the MoE tiles' padding): zero sums
        if (threadIdx.x == 0) E[t] = 0;
        for (int i = threadIdx.x; i < (K >> 8); i += blockDim.x) {
            uint4* z = (uint4*)(S + 16 * ((size_t)i * ls + t));
            z[0] = z[1] = make_uint4(0u, 0u, 0u, 0u);
        }
        return;
    }
    const float4* x = (const float4*)(X + (size_t)src * K);
    float mx = 0.0f;
    #pragma unroll 4
    for (int i = threadIdx.x; i < n4; i += blockDim.x) {
        float4 v = x[i];
        mx = fmaxf(mx, max_abs4(v));
    }
    mx = block_max(mx, red);
    int e = f16_split_exponent(mx);
    if (threadIdx.x == 0) E[t] = e;
    // thread: 4 consecutive elements; 8 neighbouring lanes: one 32-k sub-block (blockDim.x % 32 == 0; whole warps
    // iterate, so the shuffles have every lane)
    int lane = threadIdx.x & 31;
    #pragma unroll 2
    for (int w = threadIdx.x - lane; w < n4; w += blockDim.x) {
        int i = w + lane;
        bool in = i < n4;
        float4 v4 = in ? x[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        float v[4] = {ldexpf(v4.x, -e), ldexpf(v4.y, -e), ldexpf(v4.z, -e), ldexpf(v4.w, -e)};
        u32 h[2], l[2];
        #pragma unroll
        for (int p = 0; p < 2; p++) f16_split2(v[2 * p], v[2 * p + 1], &h[p], &l[p]);
        if (in) {
            *(uint2*)(Xh + (size_t)t * K + 4 * i) = make_uint2(h[0], h[1]);
            *(uint2*)(Xl + (size_t)t * K + 4 * i) = make_uint2(l[0], l[1]);
        }
        float s = (v[0] + v[1]) + (v[2] + v[3]);
        s += SHFL_XOR(s, 1);
        s += SHFL_XOR(s, 2);
        s += SHFL_XOR(s, 4);
        if (in && (i & 7) == 0 && (i >> 6) < (K >> 8)) {      // whole super-blocks only (the tiles' K-quants)
            unsigned short* o = S + 16 * ((size_t)(i >> 6) * ls + t) + ((i >> 3) & 7);
            u32 hs, ts;                               // the low halves: s / 32's head and tail
            f16_split2(s * 0.03125f, 0.0f, &hs, &ts);
            o[0] = (unsigned short)hs;
            o[8] = (unsigned short)ts;
        }
    }
}

#if HALO_TC
// f16 offset of 16-byte chunk c (k 8c .. 8c + 7) of row n in a [rows][32] f16 tile: chunks XOR-swizzled by bits 1-2
// of the row, so the 8 rows of an ldmatrix matrix (row stride 64 bytes, no padding) hit distinct banks
__device__ __forceinline__ int th_sw(int n, int c) { return 32 * n + 8 * (c ^ ((n >> 1) & 3)); }

// Stage at k0 of the token tile into xs ([head | tail][NB tokens][32] f16, swizzled): thread t copies chunk t % 4 of
// tokens t / 4 + NB / 2 j of heads and tails. GATHER (the MoE th tiles): the tile's token n is row src[j] of the
// split instead (this thread's two tokens, read once by th_run from its xrows)
template <int NB, bool GATHER>
__device__ __forceinline__ void th_load_x(const unsigned short* Xh, const unsigned short* Xl, int K, int T, int tok0,
                                          int k0, saddr xs, const int* src) {
    int t = threadIdx.x, c = t & 3;
    #pragma unroll
    for (int j = 0; j < 2; j++) {
        int n = (t >> 2) + (NB / 2) * j, tok = tok0 + n;
        bool in = tok < T;
        size_t o = in ? (size_t)(GATHER ? src[j] : tok) * K + k0 + 8 * c : 0;
        cp_async16_at(xs + 2 * th_sw(n, c), Xh + o, in ? 16 : 0);
        cp_async16_at(xs + 2 * (NB * 32 + th_sw(n, c)), Xl + o, in ? 16 : 0);
    }
}

// The activation sums of the super-block at k0 (k0 % 256 == 0; halo_split_f16's S) into sb ([NB tokens][16] f16,
// token n's 8 heads and 8 tails with the two halves swapped where bit 2 of n is set, so th_min's reads of 8 tokens are
// conflict-free): thread t copies half t / NB of token t % NB, whose row of the split is `row` (GATHER: from th_run's
// xrows); a token past T reads as zero. Sub-blocks outside the block's k range keep their sums: th_store_mins zeroes
// their mins.
template <int NB>
__device__ __forceinline__ void th_load_sums(const unsigned short* S, int T, int ls, int tok0, int k0, int row,
                                             saddr sb) {
    int t = threadIdx.x, n = t & (NB - 1), half = t / NB;
    bool in = tok0 + n < T;
    cp_async16_at(sb + 32 * n + 16 * (half ^ ((n >> 2) & 1)),
                  in ? S + 16 * ((size_t)(k0 >> 8) * ls + row) + 8 * half : S, in ? 16 : 0);
}

// 0x6400 | byte i of v, per f16 lane: pairs (b0, b1) and (b2, b3) as f16 1024 + b, then minus off (f16x2)
__device__ __forceinline__ void th_codes(u32 v, u32 off, u32* out) {
    u32 p0 = __byte_perm(v, 0x64u, 0x4140), p1 = __byte_perm(v, 0x64u, 0x4342);
    out[0] = f16x2_sub(p0, off);
    out[1] = f16x2_sub(p1, off);
}

// The 8 codes of tp_fetch's raw bytes as 4 f16x2 words at ws, and the row's scales {first 16 k, second 16 k, min}
// (sc4; Q4_K's third is 32 dmin, th_min's factor). Q4_K's codes are s q, its 6-bit sub-block scale folded in
// (<= 63 x 15 = 945: exact in f16), so both scales are the super-block's d and th_mma promotes once per 32-k stage;
// Q6_K's (int8 scales) are q - 32.
__device__ __forceinline__ void th_store(int type, int k0, int gi, const u32* raw, unsigned short* ws, float* sc4) {
    int e = (k0 & 255) + 8 * gi;
    u32 w[4];
    float sc, mn;
    if (type == T_Q4_K) {
        int h = (e >> 5) & 1;
        float d = half_to_float(raw[0] & 0xffffu), dmin = half_to_float(raw[0] >> 16), s, m;
        scale_min_k4_reg(e >> 5, raw[1], raw[2], raw[3], &s, &m);
        sc = d; mn = 32.0f * dmin;                     // th_min's sums enter as sum / 32 (f16's range)
        th_codes((raw[4] >> (4 * h)) & 0x0f0f0f0fu, 0x64006400u, w);
        th_codes((raw[5] >> (4 * h)) & 0x0f0f0f0fu, 0x64006400u, w + 2);
        u32 s2 = (u32)float_to_half(s) * 0x10001u;
        #pragma unroll
        for (int i = 0; i < 4; i++) w[i] = f16x2_mul(w[i], s2);
    } else {                                          // T_Q6_K
        int k = (e & 127) >> 5;
        u32 sh = raw[7];
        u32 ql0 = (u32)(((((u64)raw[1]) << 32) | raw[0]) >> sh), ql1 = (u32)(((((u64)raw[2]) << 32) | raw[1]) >> sh);
        u32 qh0 = (u32)(((((u64)raw[4]) << 32) | raw[3]) >> sh), qh1 = (u32)(((((u64)raw[5]) << 32) | raw[4]) >> sh);
        sc = half_to_float(raw[6] >> 16) * (float)(signed char)(raw[6] & 255u);
        mn = 0.0f;
        int sl = 4 * (k >> 1), shh = 2 * k;
        th_codes(((ql0 >> sl) & 0x0f0f0f0fu) | (((qh0 >> shh) & 0x03030303u) << 4), 0x64206420u, w);
        th_codes(((ql1 >> sl) & 0x0f0f0f0fu) | (((qh1 >> shh) & 0x03030303u) << 4), 0x64206420u, w + 2);
    }
    *(uint4*)ws = make_uint4(w[0], w[1], w[2], w[3]);
    if (gi == 0) { sc4[0] = sc; sc4[2] = mn; }
    if (gi == (type == T_Q4_K ? 0 : 2)) sc4[1] = sc;
}

// Q4_K: the 6-bit mins of sub-blocks 2 gi and 2 gi + 1 of the row's super-block at k0 (raw: tp_fetch's bytes of any
// stage in it) as an f16 pair (exact) at mn, a sub-block outside the block's k range [klo, khi) as 0: the four
// threads of a row write its 8, th_min's A operand
__device__ __forceinline__ void th_store_mins(int gi, const u32* raw, int k0, int klo, int khi, u32* mn) {
    u32 sc, m;
    q4k_scale_pairs(raw[1], raw[2], raw[3], gi, &sc, &m);
    int k = k0 + 64 * gi;
    m &= (k >= klo && k < khi ? 0x00ffu : 0u) | (k + 32 >= klo && k + 32 < khi ? 0xff00u : 0u);
    *mn = f16x2_sub(__byte_perm(m, 0x64u, 0x4140), 0x64006400u);   // f16 1024 + m, minus 1024
}

// acc += scale x f, f = 0: an MMA fragment's sum (C layout: elements 0-1 of row g, 2-3 of row g + 8, scales s0 / s1)
// promoted into the float32 accumulator
__device__ __forceinline__ void th_promote(float* acc, float s0, float s1, float* f) {
    acc[0] = fmaf(s0, f[0], acc[0]);
    acc[1] = fmaf(s0, f[1], acc[1]);
    acc[2] = fmaf(s1, f[2], acc[2]);
    acc[3] = fmaf(s1, f[3], acc[3]);
    f[0] = f[1] = f[2] = f[3] = 0.0f;
}

// One 32-k stage of rows (m ? mr1 : mr0) + 0..15 x tokens n0 + 8 j + 0..7: codes at ws ([64][32] f16), row scales
// Sc (float4 per row), activations at xs ([head | tail][NB][32] f16) (tiles th_sw-swizzled; an ldmatrix
// matrix's 8 rows start at multiples of 8, so lane's row bits 1-2 are those of lane & 7). ONE0 / ONE1 (the rows of
// m = 0 / 1 are Q4_K): the stage's 4 MMAs go on accumulating into sup[m][j], unscaled (every code of a super-block
// has the same scale d, its sub-block scale folded in: th_store), and th_flush adds d sup to acc once per TH_SUM_K
// of k rather than once per stage (2 FFMAs per output per stage were the stage's largest instruction class);
// Q6_K rows: a fresh fragment per 16-k half (2 MMAs), each scaled into acc. Compile-time, so the stage is one basic
// block: with the choice made at run time each (m, j) sat behind its own branch and its chain of dependent MMAs ran
// alone (run 17's SASS; ncu: issue slots ~53% busy, most stalls on the MMAs' fixed latency). Per j the two m's
// chains are interleaved, each in its own order.
template <int NB, bool ONE0, bool ONE1>
__device__ __forceinline__ void th_mma(saddr ws, const float* Sc, saddr xs, int mr0, int mr1, int n0,
                                       float (*acc)[4][4], float (*sup)[4][4]) {
    constexpr bool ONE[2] = {ONE0, ONE1};
    int lane = threadIdx.x & 31, g = lane >> 2, l7 = lane & 7;
    // ldmatrix rows: A matrix i = lane / 8 is (rows + 8 (i & 1), k + 8 (i >> 1)); B matrix i is (head | tail by
    // i >> 1, k + 8 (i & 1)) of 8 tokens
    int sw = (l7 >> 1) & 3;
    saddr pa[2];                                     // byte addresses: 2 per f16
    #pragma unroll
    for (int m = 0; m < 2; m++) pa[m] = ws + 64 * ((m ? mr1 : mr0) + l7 + 8 * ((lane >> 3) & 1));
    int ca[2] = {16 * ((lane >> 4) ^ sw), 16 * ((2 + (lane >> 4)) ^ sw)};            // [half]: k chunk of A
    saddr pb = xs + 64 * ((lane >> 4) * NB + n0 + l7);
    int cb[2] = {16 * (((lane >> 3) & 1) ^ sw), 16 * ((2 + ((lane >> 3) & 1)) ^ sw)};  // ... of B
    // Q6_K rows' scales first, in registers (ldmatrix's memory clobber would have them reloaded after each load):
    // sc[m][half][row g | row g + 8]
    float sc[2][2][2];
    #pragma unroll
    for (int m = 0; m < 2; m++) {
        int r = (m ? mr1 : mr0) + g;
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            sc[m][half][0] = ONE[m] ? 0.0f : Sc[4 * r + half];
            sc[m][half][1] = ONE[m] ? 0.0f : Sc[4 * (r + 8) + half];
        }
    }
    u32 a[2][2][4];                                  // [half][m]
    #pragma unroll
    for (int half = 0; half < 2; half++)
        #pragma unroll
        for (int m = 0; m < 2; m++) ldmatrix_x4_at(a[half][m], pa[m] + ca[half]);
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        u32 b[2][4];
        #pragma unroll
        for (int half = 0; half < 2; half++) ldmatrix_x4_at(b[half], pb + 512 * j + cb[half]);
        float part[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        #pragma unroll
        for (int half = 0; half < 2; half++) {
            #pragma unroll
            for (int m = 0; m < 2; m++) {                                               // tails first
                const u32* am = a[half][m];
                mma_f16(ONE[m] ? sup[m][j] : part[m], am[0], am[1], am[2], am[3], b[half][2], b[half][3]);
            }
            #pragma unroll
            for (int m = 0; m < 2; m++) {
                const u32* am = a[half][m];
                mma_f16(ONE[m] ? sup[m][j] : part[m], am[0], am[1], am[2], am[3], b[half][0], b[half][1]);
            }
            #pragma unroll
            for (int m = 0; m < 2; m++) {
                if (!ONE[m]) th_promote(acc[m][j], sc[m][half][0], sc[m][half][1], part[m]);
            }
        }
    }
}

// acc += d x sup for the Q4_K rows of th_mma (d: the super-block's scale, Sc's second word), sup = 0: every TH_SUM_K
// of k and at the end of the block's k range
template <bool ONE0, bool ONE1>
__device__ __forceinline__ void th_flush(const float* Sc, int mr0, int mr1, float (*acc)[4][4], float (*sup)[4][4]) {
    constexpr bool ONE[2] = {ONE0, ONE1};
    int g = (threadIdx.x & 31) >> 2;
    #pragma unroll
    for (int m = 0; m < 2; m++) {
        if (!ONE[m]) continue;
        int r = (m ? mr1 : mr0) + g;
        float d0 = Sc[4 * r + 1], d1 = Sc[4 * (r + 8) + 1];
        #pragma unroll
        for (int j = 0; j < 4; j++) th_promote(acc[m][j], d0, d1, sup[m][j]);
    }
}

// Q4_K's min term of one super-block for the Q4_K rows of th_mma: acc -= dmin x sum over its 8 sub-blocks i of
// m_i(row) x the token's activation sum of sub-block i, as one MMA per (m, j): A holds the rows' mins (Mn, [64][4]
// f16 pairs; exact), k 0-7 and again k 8-15, and B the tokens' sums / 32 (Sb, th_load_sums) as f16 heads (k 0-7)
// and tails (k 8-15), so the product is float32-level like the activations' own split; Sc's third word is 32 dmin.
// Per stage the same term took 32 FFMAs and the sums' loads (a tenth of the Q4_K stage's SASS). Run 30, H100,
// Qwen3-4B shapes, a 2,048-token step: gate/up 66.5 -> 63.3 ms, the whole model's 4k prompt +1.9%.
template <bool ONE0, bool ONE1>
__device__ __forceinline__ void th_min(const u32* Mn, const float* Sc, const u32* Sb, int mr0, int mr1, int n0,
                                       float (*acc)[4][4]) {
    constexpr bool ONE[2] = {ONE0, ONE1};
    int lane = threadIdx.x & 31, g = lane >> 2, q = lane & 3;
    u32 a[2][2];
    float dm[2][2];
    #pragma unroll
    for (int m = 0; m < 2; m++) {
        int r = (m ? mr1 : mr0) + g;
        a[m][0] = ONE[m] ? Mn[4 * r + q] : 0u;
        a[m][1] = ONE[m] ? Mn[4 * (r + 8) + q] : 0u;
        dm[m][0] = ONE[m] ? Sc[4 * r + 2] : 0.0f;
        dm[m][1] = ONE[m] ? Sc[4 * (r + 8) + 2] : 0.0f;
    }
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        const u32* x = Sb + 8 * (n0 + 8 * j + g) + q;     // sub-blocks 2q, 2q + 1 of token g: heads, tails
        int sw = (g >> 2) & 1;                          // th_load_sums' half swap of this token
        u32 h = x[4 * sw], t = x[4 * (sw ^ 1)];
        #pragma unroll
        for (int m = 0; m < 2; m++) {
            if (!ONE[m]) continue;
            float f[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            mma_f16(f, a[m][0], a[m][1], a[m][0], a[m][1], h, t);
            acc[m][j][0] = fmaf(-dm[m][0], f[0], acc[m][j][0]);
            acc[m][j][1] = fmaf(-dm[m][0], f[1], acc[m][j][1]);
            acc[m][j][2] = fmaf(-dm[m][1], f[2], acc[m][j][2]);
            acc[m][j][3] = fmaf(-dm[m][1], f[3], acc[m][j][3]);
        }
    }
}

// The k that th_mma's Q4_K chains span before th_flush scales them into acc: a power of two from 32 (a fresh chain
// per stage) to 256 (a super-block). A chain's MMAs add to a running sum in the tensor core's float32, which drops
// (truncates) an addend's bits below the sum's, so a longer chain saves FFMAs and loses more. Run 18, H100,
// 32 / 64 / 128 / 256: Qwen3-4B shapes pp512 9,215 / 9,624 / 9,762 / 9,652 tok/s; test_tch_scales_every_token_on_
// its_own's worst token (an outlier first in its super-block) 0.68 / 1.72 / 2.95 / 4.49 x 1e-6 of |x| |w|, where
// the tile tests hold every product to 2e-6.
#define TH_SUM_K 64

// th_run's buffers, declared once per entry (a __shared__ array inside th_run would exist once per instance)
template <int NB>
struct ThShared {
    __align__(16) unsigned short Ws[2][TP_BM * 32];
    __align__(16) unsigned short Xs[2][2 * NB * 32];
    __align__(16) float Sc[2][TP_BM * 4];
    __align__(16) u32 Sb[NB * 8];                // th_min's sums and mins: one super-block's, written at its first
    __align__(16) u32 Mn[TP_BM * 4];             // stage, read at its last (NB 128: 47 KB in all, of 48)
};

// tk_run for tch: weight codes, scales and activations double-buffered, one barrier per stage. Thread t decodes
// group t % 4 of tile rows t / 4 + NB / 2 i, i < 128 / NB (rp[i]; of th_mma's m = 1 rows where up[i], else of m = 0's:
// warp-uniform). Each row's type follows from ONE0 / ONE1 at compile time (a constant where they agree). Where a row
// is Q4_K, each super-block's mins and activation sums are written at its first stage of the block's k range, after
// the barrier that ends the previous super-block's th_min, and read by th_min at its last stage.
template <int NB, bool ONE0, bool ONE1, bool GATHER = false>
__device__ __forceinline__ void th_run(ThShared<NB>& sm, const unsigned char* const* rp, const bool* up,
                                       const unsigned short* Xh, const unsigned short* Xl, const unsigned short* S,
                                       int K, int T, int ls, int tok0, int kbeg, int kc, int mr0, int mr1, int n0,
                                       float (*acc)[4][4], const i32* xrows = nullptr) {
    constexpr int RT = 128 / NB;                       // weight rows per thread
    constexpr bool MIN = ONE0 || ONE1;                 // some rows are Q4_K: th_min's super-block buffers
    unsigned short (*Ws)[TP_BM * 32] = sm.Ws;
    float (*Sc)[TP_BM * 4] = sm.Sc;
    float sup[2][4][4];                                // Q4_K rows' unscaled chains (th_mma, TH_SUM_K)
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[m][j][e] = sup[m][j][e] = 0.0f;
    int t = threadIdx.x, gi = t & 3, kend = kbeg + kc;
    int r[RT], wo[RT], ty[RT];
    #pragma unroll
    for (int i = 0; i < RT; i++) {
        r[i] = (t >> 2) + (NB / 2) * i; wo[i] = th_sw(r[i], gi);
        ty[i] = (ONE0 == ONE1 ? ONE0 : up[i] ? ONE1 : ONE0) ? T_Q4_K : T_Q6_K;
    }
    u32 raw[RT][8];
    // buffer b of Ws / Xs at ws0 / xs0 + b x its size (ldmatrix and cp.async take these addresses)
    const saddr ws0 = shared_addr(sm.Ws), xs0 = shared_addr(sm.Xs), sb0 = shared_addr(sm.Sb);
    constexpr int WSZ = sizeof(sm.Ws[0]), XSZ = sizeof(sm.Xs[0]);
    int src[2] = {0, 0}, srow = tok0 + (t & (NB - 1)); // the split's rows of this thread's tokens (th_load_x) and of
    if constexpr (GATHER) {                            // token t % NB (th_load_sums); GATHER: from xrows
        #pragma unroll
        for (int j = 0; j < 2; j++) {
            int tok = tok0 + (t >> 2) + (NB / 2) * j;
            src[j] = tok < T ? xrows[tok] : 0;
        }
        srow = srow < T ? xrows[srow] : 0;
    }
    // this super-block's sums and mins (the first stage's raw bytes hold its header)
    auto super_block = [&](int k) {
        th_load_sums<NB>(S, T, ls, tok0, k & ~255, srow, sb0);
        #pragma unroll
        for (int i = 0; i < RT; i++)
            if (ty[i] == T_Q4_K) th_store_mins(gi, raw[i], k & ~255, kbeg, kend, sm.Mn + 4 * r[i] + gi);
    };
    th_load_x<NB, GATHER>(Xh, Xl, K, T, tok0, kbeg, xs0, src);
    #pragma unroll
    for (int i = 0; i < RT; i++) tp_fetch(ty[i], rp[i], kbeg, gi, raw[i]);
    if constexpr (MIN) super_block(kbeg);
    cp_async_commit();
    #pragma unroll
    for (int i = 0; i < RT; i++) th_store(ty[i], kbeg, gi, raw[i], Ws[0] + wo[i], Sc[0] + 4 * r[i]);
    cp_async_wait_all();
    __syncthreads();
    int nst = kc / TP_BK;
    for (int s = 0; s < nst; s++) {
        int k = kbeg + TP_BK * s, k1 = k + TP_BK, cur = s & 1;
        bool more = s + 1 < nst, first = MIN && s > 0 && (k & 255) == 0;
        if (first) super_block(k);                     // raw: this stage's bytes until the fetch below
        if (more) {
            th_load_x<NB, GATHER>(Xh, Xl, K, T, tok0, k1, xs0 + (cur ^ 1) * XSZ, src);
            #pragma unroll
            for (int i = 0; i < RT; i++) tp_fetch(ty[i], rp[i], k1, gi, raw[i]);
        }
        cp_async_commit();
        th_mma<NB, ONE0, ONE1>(ws0 + cur * WSZ, Sc[cur], xs0 + cur * XSZ, mr0, mr1, n0, acc, sup);
        if ((k1 & (TH_SUM_K - 1)) == 0 || !more) th_flush<ONE0, ONE1>(Sc[cur], mr0, mr1, acc, sup);  // k1: next stage's
        if (MIN && ((k1 & 255) == 0 || !more)) {       // the super-block's last stage in the range
            if (first) {                               // ... and its first: its buffers were written this stage
                cp_async_wait_all();
                __syncthreads();
            }
            th_min<ONE0, ONE1>(sm.Mn, Sc[cur], sm.Sb, mr0, mr1, n0, acc);
        }
        if (more) {                                    // the other buffers: last read before the previous barrier
            #pragma unroll
            for (int i = 0; i < RT; i++) th_store(ty[i], k1, gi, raw[i], Ws[cur ^ 1] + wo[i], Sc[cur ^ 1] + 4 * r[i]);
        }
        cp_async_wait_all();
        __syncthreads();
    }
}

template <int NB>
__device__ __forceinline__ void th_matmul(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,
                                          const unsigned char* w1, i32 t1_, i32 n1, i32 rb1,
                                          const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,
                                          const float* bias, const unsigned short* Xh, const unsigned short* Xl,
                                          const unsigned short* S, const i32* E, i32 K, i32 T, i32 ls, float* Y,
                                          i32 ldy, i32 kc, float* P) {
    int row0 = blockIdx.x * TP_BM, tok0 = blockIdx.y * NB, z = blockIdx.z, rows_all = n0 + n1 + n2;
    const unsigned char* base; int type, rb, local;
    if (row0 < n0) { base = w0; type = t0_; rb = rb0; local = row0; }
    else if (row0 < n0 + n1) { base = w1; type = t1_; rb = rb1; local = row0 - n0; }
    else { base = w2; type = t2_; rb = rb2; local = row0 - n0 - n1; }
    const unsigned char* rows = base + (size_t)local * rb;
    int warp = threadIdx.x >> 5, mr0 = 32 * (warp & 1), nw = 32 * (warp >> 1);     // 2 (rows) x NB / 32 (tokens)
    float acc[2][4][4];
    bool q4 = type == T_Q4_K;
    const unsigned char* rp[2] = {rows + (size_t)(threadIdx.x >> 2) * rb, rows + (size_t)((threadIdx.x >> 2) + 32) * rb};
    const bool up[2] = {false, false};
    __shared__ ThShared<NB> sm;
    if (q4) th_run<NB, true, true>(sm, rp, up, Xh, Xl, S, K, T, ls, tok0, z * kc, kc, mr0, mr0 + 16, nw, acc);
    else th_run<NB, false, false>(sm, rp, up, Xh, Xl, S, K, T, ls, tok0, z * kc, kc, mr0, mr0 + 16, nw, acc);
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int tok = tok0 + tp_tok(nw, j, e);
            if (tok >= T) continue;
            int sh = E[tok];
            #pragma unroll
            for (int m = 0; m < 2; m++)
                tc_out(Y, ldy, bias, P, rows_all, T, tok, row0 + tp_row(mr0 + 16 * m, e), ldexpf(acc[m][j][e], sh));
        }
}

// GLU: rows row0 .. row0 + 31 of gate (tile rows 0-31) and of up (32-63), as tck
template <int NB>
__device__ __forceinline__ void th_glu(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                                       i32 rb_u, i32 n_ff, i32 act, const unsigned short* Xh, const unsigned short* Xl,
                                       const unsigned short* S, const i32* E, i32 K, i32 T, i32 ls, float* A, i32 kc,
                                       float* P) {
    int row0 = blockIdx.x * (TP_BM / 2), tok0 = blockIdx.y * NB, z = blockIdx.z;
    int warp = threadIdx.x >> 5, mr0 = 16 * (warp & 1), nw = 32 * (warp >> 1);
    float acc[2][4][4];
    // tile rows 0-31 gate, 32-63 up: NB 64, thread t decodes gate row t / 4 and up row t / 4; NB 128, threads 0-127
    // gate rows, 128-255 up rows
    int r = row0 + ((threadIdx.x >> 2) & 31);
    bool up = NB == 128 && threadIdx.x >= 128;
    const unsigned char* rp[2] = {up ? wu + (size_t)r * rb_u : wg + (size_t)r * rb_g, wu + (size_t)r * rb_u};
    const bool ups[2] = {up, true};
    __shared__ ThShared<NB> sm;
    bool g4 = tg == T_Q4_K, u4 = tu == T_Q4_K;        // each pair of types its own instance (see th_mma)
    if (g4 && u4) th_run<NB, true, true>(sm, rp, ups, Xh, Xl, S, K, T, ls, tok0, z * kc, kc, mr0, mr0 + 32, nw, acc);
    else if (g4) th_run<NB, true, false>(sm, rp, ups, Xh, Xl, S, K, T, ls, tok0, z * kc, kc, mr0, mr0 + 32, nw, acc);
    else if (u4) th_run<NB, false, true>(sm, rp, ups, Xh, Xl, S, K, T, ls, tok0, z * kc, kc, mr0, mr0 + 32, nw, acc);
    else th_run<NB, false, false>(sm, rp, ups, Xh, Xl, S, K, T, ls, tok0, z * kc, kc, mr0, mr0 + 32, nw, acc);
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int tok = tok0 + tp_tok(nw, j, e);
            if (tok >= T) continue;
            int sh = E[tok];
            tc_glu_out(A, n_ff, act, P, T, tok, row0 + tp_row(mr0, e), ldexpf(acc[0][j][e], sh),
                       ldexpf(acc[1][j][e], sh));
        }
}
#define TH_BODY(call) call
#else
#define TH_BODY(call)
#endif

// The entries of each build: NB tokens per block, 2 NB threads, BLOCKS blocks per SM
#define TCH_MATMUL_ENTRY(NAME, NB, BLOCKS)                                                                           \
HALO_KERNEL __launch_bounds__(2 * NB, BLOCKS) void NAME(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0,           \
        const unsigned char* w1, i32 t1_, i32 n1, i32 rb1, const unsigned char* w2, i32 t2_, i32 n2, i32 rb2,        \
        const float* bias, const unsigned short* Xh, const unsigned short* Xl, const unsigned short* S,              \
        const i32* E, i32 K, i32 T, i32 ls, float* Y, i32 ldy, i32 kc, float* P) {                                   \
    GRID_DEPENDENCY_SYNC();                                                                                          \
    TH_BODY(th_matmul<NB>(w0, t0_, n0, rb0, w1, t1_, n1, rb1, w2, t2_, n2, rb2, bias, Xh, Xl, S, E, K, T, ls, Y, ldy, \
                          kc, P));                                                                                   \
}
#define TCH_GLU_ENTRY(NAME, NB, BLOCKS)                                                                              \
HALO_KERNEL __launch_bounds__(2 * NB, BLOCKS) void NAME(const unsigned char* wg, i32 tg, const unsigned char* wu,     \
        i32 tu, i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const unsigned short* Xh, const unsigned short* Xl,           \
        const unsigned short* S, const i32* E, i32 K, i32 T, i32 ls, float* A, i32 kc, float* P) {                   \
    GRID_DEPENDENCY_SYNC();                                                                                          \
    TH_BODY(th_glu<NB>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, Xh, Xl, S, E, K, T, ls, A, kc, P));                    \
}
TCH_MATMUL_ENTRY(halo_matmul_tch, 64, 4)       // 128 threads, four blocks per SM
TCH_GLU_ENTRY(halo_glu_tch, 64, 4)
TCH_MATMUL_ENTRY(halo_matmul_tch128, 128, 2)   // 256 threads, two blocks per SM
TCH_GLU_ENTRY(halo_glu_tch128, 128, 2)


// ---------------------------------------------------------------------------------------------------------
// Batched decode on NVIDIA tensor cores, "tn" (CUDA sm_80+): steps of 2..16 tokens (one token of each of up to 16
// requests) on Q4_K / Q6_K rows with K % 256 == 0. bq_t16 and kq_tN spend 16 float FMAs per weight there (the
// H200 ran a 16-token step of the 4B shapes at ~7 TFLOP/s, 5x a one-token step); here a warp's 16 weight rows are
// the A operand of mma.m16n8k8 TF32 and the step's tokens the B operand (NT = 8: one n8 tile, NT = 16: two).
// Arithmetic as tck: the weights enter as their integer codes, exact in TF32 (Q4_K 0..15, Q6_K -32..31), the
// activations as TF32 head + tail (2 MMAs per product); each sub-block's products accumulate in a fresh fragment
// that is scaled by the row's sub-block scale when added to the float32 accumulators, and Q4_K's min subtracts
// (dmin m) times the token's sum of the sub-block's activations.
// k order: one MMA's 8 k slots must share a sub-block scale, so lane (g, q) takes a run of the sub-block: Q4_K
// (32 elements) elements 8q .. 8q + 7, slot q <-> 8q + 2s and slot q + 4 <-> 8q + 2s + 1 in MMA s of 4 (one
// 8-byte load holds both nibbles: two sub-blocks); Q6_K (16 elements) 4q .. 4q + 3 over 2 MMAs. Both operands
// use the same order, so this only relabels the sum's terms.
// Activations: 16 tokens x 4 bytes per k against 16 rows x ~0.6 bytes of weights, so a warp loading its own
// (measured: per-warp loads and TF32 splits, 1.3x slower at 16 tokens on the whole step) spends most of its
// time on them. A block of TN_WARPS warps takes TN_WARPS x 16 rows (each warp its own 16-row group, any
// segment) over a K slice (gridDim.z > 1: super-blocks [z ksb, (z + 1) ksb), partial sums in P as tck, added by
// halo_splitk_sum); per super-block the block writes the NT tokens' 256 activations to shared memory once,
// already split into TF32 head and tail, with each 32-k sub-block's sums, and every warp reads its B fragments
// from there. The weights of a super-block are fetched before its staging so their latency overlaps it; the
// next activations are fetched during the MMAs. Tokens past T read token T - 1 and are never written.
// Two blocks per SM (__launch_bounds__: at most 128 registers, a few spilled at 16 tokens): H200, 4B shapes, the
// 16-token step 7.52 -> 6.48 ms against one block of 140 registers.
// Contract (host): every segment's rows % 16 == 0. Grid: (ceil(rows / (16 TN_WARPS)), ceil(T / NT), splits);
// block: 32 * TN_WARPS. HIP: compiles to nothing (the host keeps bq_t16 / r1_t4 / r4_t8 there).
#define TN_WARPS 8
#define TN_ROWS 16
#define TN_LDX 260                 // words per staged token row: 256 k + 4 pad (16-byte reads conflict-free)
#define TN_RAW 17                  // raw words per row and super-block (Q6_K's; Q4_K uses 12)
#define TN_V(NJ) (64 * (NJ) / TN_WARPS)   // activations each thread stages per super-block (8 NJ tokens x 256)

#if HALO_TC
// byte i of w as the float whose bits the MMA reads (exact small integer minus `off`)
__device__ __forceinline__ u32 tn_code(u32 w, int i, float off) { return __float_as_uint(byte_f(w, i, off)); }

// 4 bytes at a 2-byte aligned address (the two aligned words from p & ~3, funnel-shifted: reads up to p + 7)
__device__ __forceinline__ u32 tn_ld4(const unsigned char* p) {
    const u32* a = (const u32*)((size_t)p & ~(size_t)3);
    return __funnelshift_r(__ldg(a), __ldg(a + 1), (u32)((size_t)p & 3) * 8u);
}

// acc[j] += sc * part, part = the integer rows (codes: word w[r][i / 4] byte i % 4 of row g (r = 0) / g + 8 (r = 1),
// minus off) times the run's activations; then minus mn * the token sums (Q4_K)
template <int NJ, int N>
__device__ __forceinline__ void tn_mma(const u32 (*w)[N / 4], float off, const u32 (*bh)[N], const u32 (*bl)[N],
                                       const float* sc, const float* mn, const float* c0, const float* c1,
                                       float (*acc)[4]) {
    float part[NJ][4];
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) part[j][e] = 0.0f;
    #pragma unroll
    for (int s = 0; s < N / 2; s++) {
        int i0 = 2 * s, i1 = 2 * s + 1;
        u32 a[4] = {tn_code(w[0][i0 >> 2], i0 & 3, off), tn_code(w[1][i0 >> 2], i0 & 3, off),
                    tn_code(w[0][i1 >> 2], i1 & 3, off), tn_code(w[1][i1 >> 2], i1 & 3, off)};
        #pragma unroll
        for (int j = 0; j < NJ; j++) {
            mma_tf32(part[j], a, bl[j][i0], bl[j][i1]);
            mma_tf32(part[j], a, bh[j][i0], bh[j][i1]);
        }
    }
    #pragma unroll
    for (int j = 0; j < NJ; j++) {
        acc[j][0] = fmaf(sc[0], part[j][0], acc[j][0]);
        acc[j][1] = fmaf(sc[0], part[j][1], acc[j][1]);
        acc[j][2] = fmaf(sc[1], part[j][2], acc[j][2]);
        acc[j][3] = fmaf(sc[1], part[j][3], acc[j][3]);
        if (mn) {
            acc[j][0] = fmaf(-mn[0], c0[j], acc[j][0]);
            acc[j][1] = fmaf(-mn[0], c1[j], acc[j][1]);
            acc[j][2] = fmaf(-mn[1], c0[j], acc[j][2]);
            acc[j][3] = fmaf(-mn[1], c1[j], acc[j][3]);
        }
    }
}

// This thread's share of super-block sb's staging: V = TN_V(NJ) consecutive activations of token n (256 / V threads
// per token row; V <= 32: a sub-block's sum comes from whole threads), read from xt (the token's row) into v
template <int V>
__device__ __forceinline__ void tn_load_x(const float* xt, int sb, float4* v) {
    int k0 = (threadIdx.x % (256 / V)) * V;
    #pragma unroll
    for (int i = 0; i < V / 4; i++) v[i] = __ldg((const float4*)(xt + sb * 256 + k0) + i);
}

// ... written to Xh / Xl (TF32 head / tail, [token][TN_LDX]) and the sub-block sums to Sx[token][8]
template <int V>
__device__ __forceinline__ void tn_store_x(const float4* v, u32* Xh, u32* Xl, float* Sx) {
    int t = threadIdx.x, n = t / (256 / V), k0 = (t % (256 / V)) * V;
    float s = 0.0f;
    #pragma unroll
    for (int i = 0; i < V / 4; i++) {
        float e[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
        u32 h[4], l[4];
        #pragma unroll
        for (int c = 0; c < 4; c++) { tf32_split(e[c], &h[c], &l[c]); s += e[c]; }
        *(uint4*)(Xh + n * TN_LDX + k0 + 4 * i) = make_uint4(h[0], h[1], h[2], h[3]);
        *(uint4*)(Xl + n * TN_LDX + k0 + 4 * i) = make_uint4(l[0], l[1], l[2], l[3]);
    }
    #pragma unroll
    for (int o = 1; o < 32 / V; o <<= 1) s += SHFL_XOR(s, o);
    if (t % (32 / V) == 0) Sx[n * 8 + k0 / 32] = s;
}

// Raw words of super-block sb for this lane's two rows (g, g + 8): Q4_K {header x4, quant uint2 x4 as 8}; Q6_K
// {ql windows [h][i][2] x8, qh windows [h][i] x4, scale windows [h][2] x4, d}
__device__ __forceinline__ void tn_fetch(int type, const unsigned char* row, int sb, u32* raw) {
    int q = threadIdx.x & 3;
    if (type == T_Q4_K) {
        const unsigned char* b = row + (size_t)sb * 144;
        uint4 hdr = __ldg((const uint4*)b);
        raw[0] = hdr.x; raw[1] = hdr.y; raw[2] = hdr.z; raw[3] = hdr.w;
        #pragma unroll
        for (int c = 0; c < 4; c++) {
            uint2 w = __ldg((const uint2*)(b + 16 + 32 * c + 8 * q));
            raw[4 + 2 * c] = w.x; raw[5 + 2 * c] = w.y;
        }
    } else {
        const unsigned char* b = row + (size_t)sb * 210;
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            #pragma unroll
            for (int i = 0; i < 2; i++) {
                raw[4 * h + 2 * i] = tn_ld4(b + 64 * h + 16 * i + 4 * q);
                raw[4 * h + 2 * i + 1] = tn_ld4(b + 64 * h + 32 + 16 * i + 4 * q);
                raw[8 + 2 * h + i] = tn_ld4(b + 128 + 32 * h + 16 * i + 4 * q);
            }
            raw[12 + 2 * h] = tn_ld4(b + 192 + 8 * h);
            raw[13 + 2 * h] = tn_ld4(b + 196 + 8 * h);
        }
        raw[16] = ld_u16(b + 208);
    }
}

// B fragments of tokens 8 j + g, elements e0 .. e0 + N of the staged super-block
template <int NJ, int N>
__device__ __forceinline__ void tn_b(const u32* Xh, const u32* Xl, int e0, u32 (*bh)[N], u32 (*bl)[N]) {
    int g = (threadIdx.x & 31) >> 2;
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int i = 0; i < N; i += 4) {
            *(uint4*)&bh[j][i] = *(const uint4*)(Xh + (8 * j + g) * TN_LDX + e0 + i);
            *(uint4*)&bl[j][i] = *(const uint4*)(Xl + (8 * j + g) * TN_LDX + e0 + i);
        }
}

// acc += the raw super-block of this lane's rows (raw[0 / 1]: rows g / g + 8) times the staged activations
template <int NJ>
__device__ __forceinline__ void tn_smma(int type, const u32 (*raw)[TN_RAW], const u32* Xh, const u32* Xl,
                                       const float* Sx, float (*acc)[4]) {
    int q = threadIdx.x & 3;
    if (type == T_Q4_K) {
        float d[2], dmin[2];
        #pragma unroll
        for (int r = 0; r < 2; r++) {
            d[r] = half_to_float(raw[r][0] & 0xffffu);
            dmin[r] = half_to_float(raw[r][0] >> 16);
        }
        #pragma unroll
        for (int c = 0; c < 4; c++)
            #pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                int e0 = 64 * c + 32 * hh + 8 * q, j8 = 2 * c + hh;
                u32 bh[NJ][8], bl[NJ][8];
                tn_b<NJ, 8>(Xh, Xl, e0, bh, bl);
                float c0[NJ], c1[NJ];
                #pragma unroll
                for (int j = 0; j < NJ; j++) {
                    c0[j] = Sx[(8 * j + 2 * q) * 8 + j8];
                    c1[j] = Sx[(8 * j + 2 * q + 1) * 8 + j8];
                }
                u32 w[2][2];
                float sc[2], mn[2];
                #pragma unroll
                for (int r = 0; r < 2; r++) {
                    w[r][0] = (raw[r][4 + 2 * c] >> (4 * hh)) & 0x0f0f0f0fu;
                    w[r][1] = (raw[r][5 + 2 * c] >> (4 * hh)) & 0x0f0f0f0fu;
                    float S, M;
                    scale_min_k4_reg(j8, raw[r][1], raw[r][2], raw[r][3], &S, &M);
                    sc[r] = d[r] * S;
                    mn[r] = dmin[r] * M;
                }
                tn_mma<NJ, 8>(w, 0.0f, bh, bl, sc, mn, c0, c1, acc);
            }
    } else {
        float d[2] = {half_to_float(raw[0][16]), half_to_float(raw[1][16])};
        #pragma unroll
        for (int h = 0; h < 2; h++)
            #pragma unroll
            for (int kk = 0; kk < 4; kk++)
                #pragma unroll
                for (int i = 0; i < 2; i++) {
                    u32 bh[NJ][4], bl[NJ][4];
                    tn_b<NJ, 4>(Xh, Xl, 128 * h + 32 * kk + 16 * i + 4 * q, bh, bl);
                    int si = 2 * kk + i;             // the scale's byte in this half's 8
                    u32 w[2][1];
                    float sc[2];
                    #pragma unroll
                    for (int r = 0; r < 2; r++) {
                        const u32* rw = raw[r];
                        w[r][0] = ((rw[4 * h + 2 * i + (kk & 1)] >> (4 * (kk >> 1))) & 0x0f0f0f0fu) |
                                  (((rw[8 + 2 * h + i] >> (2 * kk)) & 0x03030303u) << 4);
                        sc[r] = d[r] * (float)(signed char)((rw[12 + 2 * h + (si >> 2)] >> (8 * (si & 3))) & 255u);
                    }
                    tn_mma<NJ, 4>(w, 32.0f, bh, bl, sc, nullptr, nullptr, nullptr, acc);
                }
    }
}

// The k loop shared by matmul and GLU (gate, then up): rows of one type (rp[0 / 1]: this lane's rows g / g + 8;
// busy: this warp has rows), x the row of this thread's staging token; super-blocks [sb0, sb1); the staging
// buffers Xh, Xl ([8 NJ][TN_LDX] words) and Sx ([8 NJ][8] floats) in shared memory
template <int NJ>
__device__ __forceinline__ void tn_loop(int type, const unsigned char* const* rp, bool busy, const float* x,
                                        int sb0, int sb1, u32* Xh, u32* Xl, float* Sx, float (*acc)[4]) {
    static_assert(TN_V(NJ) % 4 == 0 && TN_V(NJ) <= 32, "TN_V: whole float4s, at most one sub-block per thread");
    float4 v[TN_V(NJ) / 4];
    u32 raw[2][TN_RAW];
    if (sb0 < sb1) tn_load_x<TN_V(NJ)>(x, sb0, v);
    for (int sb = sb0; sb < sb1; sb++) {
        if (busy)
            #pragma unroll
            for (int r = 0; r < 2; r++) tn_fetch(type, rp[r], sb, raw[r]);
        tn_store_x<TN_V(NJ)>(v, Xh, Xl, Sx);
        __syncthreads();
        if (sb + 1 < sb1) tn_load_x<TN_V(NJ)>(x, sb + 1, v);
        if (busy) tn_smma<NJ>(type, raw, Xh, Xl, Sx, acc);
        __syncthreads();                                // every warp is done with this stage
    }
}

// The activation row of this thread's staging token (through xrow when given; clamped to T - 1)
template <int NJ>
__device__ __forceinline__ const float* tn_x_row(const float* X, const i32* xrow, int K, int tok0, int T) {
    int n = tok0 + threadIdx.x / (256 / TN_V(NJ)), tt = n < T ? n : T - 1;
    return X + (size_t)(xrow ? xrow[tt] : tt) * K;
}

// acc = rows rp . x over super-blocks [sb0, sb1), zeroed first; the staging buffers live here (declared once per
// kernel that inlines this)
template <int NJ>
__device__ __forceinline__ void tn_rows_acc(int type, const unsigned char* const* rp, bool busy, const float* x,
                                            int sb0, int sb1, float (*acc)[4]) {
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) acc[j][e] = 0.0f;
    __shared__ __align__(16) u32 Xh[8 * NJ * TN_LDX], Xl[8 * NJ * TN_LDX];
    __shared__ float Sx[8 * NJ * 8];
    tn_loop<NJ>(type, rp, busy, x, sb0, sb1, Xh, Xl, Sx, acc);
}

// The GLU's: acc[0] = gate rows rg . x, acc[1] = up rows ru . x, gate then up (one pass over both would hold two row
// sets' raw words: 255 registers and spills at 16 tokens)
template <int NJ>
__device__ __forceinline__ void tn_glu_acc(int tg, const unsigned char* const* rg, int tu, const unsigned char* const* ru,
                                           bool busy, const float* x, int sb0, int sb1, float (*acc)[NJ][4]) {
    #pragma unroll
    for (int s = 0; s < 2; s++)
        #pragma unroll
        for (int j = 0; j < NJ; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) acc[s][j][e] = 0.0f;
    __shared__ __align__(16) u32 Xh[8 * NJ * TN_LDX], Xl[8 * NJ * TN_LDX];
    __shared__ float Sx[8 * NJ * 8];
    tn_loop<NJ>(tg, rg, busy, x, sb0, sb1, Xh, Xl, Sx, acc[0]);
    tn_loop<NJ>(tu, ru, busy, x, sb0, sb1, Xh, Xl, Sx, acc[1]);
}

template <int NJ>
__device__ void matmul_tn(const unsigned char* w0, i32 t0_, i32 n0, i32 rb0, const unsigned char* w1, i32 t1_,
                          i32 n1, i32 rb1, const unsigned char* w2, i32 t2_, i32 n2, i32 rb2, const float* bias,
                          const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy, i32 ksb, float* P) {
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, z = blockIdx.z;
    int tok0 = blockIdx.y * 8 * NJ, row0 = (blockIdx.x * TN_WARPS + warp) * TN_ROWS, rows_all = n0 + n1 + n2;
    bool busy = row0 < rows_all;
    int rr = busy ? row0 : 0;
    const unsigned char* base; int type, rb, local;
    if (rr < n0) { base = w0; type = t0_; rb = rb0; local = rr; }
    else if (rr < n0 + n1) { base = w1; type = t1_; rb = rb1; local = rr - n0; }
    else { base = w2; type = t2_; rb = rb2; local = rr - n0 - n1; }
    const unsigned char* rp[2] = {base + (size_t)(local + g) * rb, base + (size_t)(local + g + 8) * rb};
    float acc[NJ][4];
    int nsb = K >> 8, sb0 = min(z * ksb, nsb), sb1 = min(sb0 + ksb, nsb);
    tn_rows_acc<NJ>(type, rp, busy, tn_x_row<NJ>(X, xrow, K, tok0, T), sb0, sb1, acc);
    if (!busy) return;
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tp_row(0, e), tok = tok0 + tp_tok(0, j, e);
            if (tok >= T) continue;
            tc_out(Y, ldy, bias, P, rows_all, T, tok, row, acc[j][e]);
        }
}

// GLU: each warp's 16 rows of gate and of up
template <int NJ>
__device__ void glu_tn(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                       i32 n_ff, i32 act, const float* X, i32 K, i32 T, float* A, i32 ksb, float* P) {
    int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, z = blockIdx.z;
    int tok0 = blockIdx.y * 8 * NJ, row0 = (blockIdx.x * TN_WARPS + warp) * TN_ROWS;
    bool busy = row0 < n_ff;
    int rr = busy ? row0 : 0;
    const unsigned char* rp[2][2] = {{wg + (size_t)(rr + g) * rb_g, wg + (size_t)(rr + g + 8) * rb_g},
                                     {wu + (size_t)(rr + g) * rb_u, wu + (size_t)(rr + g + 8) * rb_u}};
    float acc[2][NJ][4];
    int nsb = K >> 8, sb0 = min(z * ksb, nsb), sb1 = min(sb0 + ksb, nsb);
    tn_glu_acc<NJ>(tg, rp[0], tu, rp[1], busy, tn_x_row<NJ>(X, 0, K, tok0, T), sb0, sb1, acc);
    if (!busy) return;
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tp_row(0, e), tok = tok0 + tp_tok(0, j, e);
            if (tok >= T) continue;
            tc_glu_out(A, n_ff, act, P, T, tok, row, acc[0][j][e], acc[1][j][e]);
        }
}
#define TN_BODY(call) call
#else
#define TN_BODY(call)
#endif

#define TN_MATMUL_ENTRY(NAME, NJ)                                                                          \
HALO_KERNEL __launch_bounds__(32 * TN_WARPS, 2) void NAME(const unsigned char* w0, i32 t0, i32 n0, i32 rb0,    \
        const unsigned char* w1, i32 t1, i32 n1, i32 rb1, const unsigned char* w2, i32 t2, i32 n2, i32 rb2,  \
        const float* bias, const float* X, const i32* xrow, i32 K, i32 T, float* Y, i32 ldy, i32 ksb,      \
        float* P) {                                                                                        \
    GRID_DEPENDENCY_SYNC();                                                                                \
    TN_BODY(matmul_tn<NJ>(w0, t0, n0, rb0, w1, t1, n1, rb1, w2, t2, n2, rb2, bias, X, xrow, K, T, Y, ldy, ksb, P)); \
}
#define TN_GLU_ENTRY(NAME, NJ)                                                                             \
HALO_KERNEL __launch_bounds__(32 * TN_WARPS, 2) void NAME(const unsigned char* wg, i32 tg,                    \
        const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, i32 T, \
        float* A, i32 ksb, float* P) {                                                                     \
    GRID_DEPENDENCY_SYNC();                                                                                \
    TN_BODY(glu_tn<NJ>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, T, A, ksb, P));                        \
}
TN_MATMUL_ENTRY(halo_matmul_tn_t8, 1)
TN_MATMUL_ENTRY(halo_matmul_tn_t16, 2)
TN_GLU_ENTRY(halo_glu_tn_t8, 1)
TN_GLU_ENTRY(halo_glu_tn_t16, 2)

// Split-K sums, in z order: Y[t][r] = bias[r] + sum_z P[z][t][r] (act < 0), or for the GLU (act >= 0)
// A[t][r] = act(sum_z P[z][0][t][r]) * sum_z P[z][1][t][r] with ldy = R. One thread per output.
HALO_KERNEL void halo_splitk_sum(const float* P, i32 splits, i32 T, i32 R, const float* bias, i32 act, float* Y,
                                 i32 ldy) {
    GRID_DEPENDENCY_SYNC();
    i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x, plane = (i64)T * R;
    if (i >= plane) return;
    int t = (int)(i / R), r = (int)(i % R);
    float s = 0.0f, u = 0.0f;
    if (act < 0) {
        for (int z = 0; z < splits; z++) s += P[z * plane + i];
        Y[(size_t)t * ldy + r] = s + (bias ? bias[r] : 0.0f);
    } else {
        for (int z = 0; z < splits; z++) { s += P[2 * z * plane + i]; u += P[(2 * z + 1) * plane + i]; }
        Y[(size_t)t * ldy + r] = act_fn(s, act) * u;
    }
}

// ---------------------------------------------------------------------------------------------------------
// Mixture of experts (engine.gpu.moe): the router's choice stays on the device and drives the expert
// products (no host round trip, so a step stays one graph). Experts are stacked as GGUF stores them: expert
// e's [rows, K] matrix is rows e * rows .. (e + 1) * rows of the stacked buffer, each row `rb` bytes.

// Per token t: ids[t, 0..k) = the k largest logits[t] (best first; ties to the lower id), w[t, j] = softmax
// of those k logits (== softmax over all, top k, renormalised). Grid: T; block: 32 (one warp per token).
// Contract (host): n_expert <= 32 * MOE_PER_LANE, k <= 32, k <= n_expert.
#define MOE_PER_LANE 8
HALO_KERNEL void halo_moe_route(const float* logits, i32 n_expert, i32 k, i32* ids, float* w) {
    GRID_DEPENDENCY_SYNC();
    int t = blockIdx.x, lane = threadIdx.x & 31;
    const float* l = logits + (size_t)t * n_expert;
    float v[MOE_PER_LANE];
    #pragma unroll
    for (int i = 0; i < MOE_PER_LANE; i++) {
        int e = lane + 32 * i;
        v[i] = e < n_expert ? l[e] : NEG_INF;
    }
    float top = 0.0f, sum = 0.0f, mine = 0.0f;
    int my_id = 0;
    for (int j = 0; j < k; j++) {
        float bv = NEG_INF;
        int bi = 0x7fffffff;
        #pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++) {
            int e = lane + 32 * i;
            if (e < n_expert && (v[i] > bv || (v[i] == bv && e < bi))) { bv = v[i]; bi = e; }
        }
        #pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            float ov = SHFL_XOR(bv, o);
            int oi = SHFL_XOR(bi, o);
            if (ov > bv || (ov == bv && oi < bi)) { bv = ov; bi = oi; }
        }
        #pragma unroll
        for (int i = 0; i < MOE_PER_LANE; i++)
            if (lane + 32 * i == bi) v[i] = NEG_INF;          // taken
        if (j == 0) top = bv;
        float ex = expf(bv - top);
        sum += ex;
        if (lane == j) { mine = ex; my_id = bi; }
    }
    if (lane < k) {
        ids[(size_t)t * k + lane] = my_id;
        w[(size_t)t * k + lane] = mine / sum;
    }
}

// The experts' gated activation of gate g and up u (biases added): act 0 / 1 as act_fn, times u; act 2 is
// gpt-oss's clamped SwiGLU (engine.model.moe.swiglu_oai, alpha and limit passed from there): gate clamped
// above at limit, up to [-limit, limit], gate * sigmoid(alpha * gate) * (up + 1).
__device__ __forceinline__ float expert_glu(float g, float u, int act, float alpha, float limit) {
    if (act != 2) return act_fn(g, act) * u;
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return g * (0.5f + 0.5f * tanhf(0.5f * (g * alpha))) * (u + 1.0f);
}

// A[p, r] = glu(gate_e[r] . X[t] + bg[e, r], up_e[r] . X[t] + bu[e, r]) for every (token, slot) pair
// p = t * k + j with e = ids[p], r < n_ff; bg / bu [n_expert, n_ff] or null (no biases).
// Grid: (ceil(n_ff / warps), T * k); block: warps * 32.
HALO_KERNEL void halo_moe_glu(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                              i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, const i32* ids, i32 k,
                              const float* bg, const float* bu, float alpha, float limit, float* A) {
    GRID_DEPENDENCY_SYNC();
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n_ff) return;
    int p = blockIdx.y;
    size_t row = (size_t)ids[p] * n_ff + r;
    const float* x = X + (size_t)(p / k) * K;
    float g = warp_sum(row_dot_fast(tg, wg + row * rb_g, K, x)) + (bg ? bg[row] : 0.0f);
    float u = warp_sum(row_dot_fast(tu, wu + row * rb_u, K, x)) + (bu ? bu[row] : 0.0f);
    if ((threadIdx.x & 31) == 0) A[(size_t)p * n_ff + r] = expert_glu(g, u, act, alpha, limit);
}

// Y[t, r] = sum_j w[t, j] * (down_e[r] . A[t * k + j] + bd[e, r]), e = ids[t * k + j], r < n_embd: the
// experts' outputs weighted and summed in one pass; bd [n_expert, n_embd] or null.
// Grid: (ceil(n_embd / warps), T); block: warps * 32.
HALO_KERNEL void halo_moe_down(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A, i32 F,
                               const i32* ids, const float* w, i32 k, const float* bd, float* Y) {
    GRID_DEPENDENCY_SYNC();
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= n_embd) return;
    int t = blockIdx.y;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) {
        size_t p = (size_t)t * k + j;
        size_t row = (size_t)ids[p] * n_embd + r;
        acc += w[p] * (warp_sum(row_dot_fast(td, wd + row * rb_d, F, A + p * F)) + (bd ? bd[row] : 0.0f));
    }
    if ((threadIdx.x & 31) == 0) Y[(size_t)t * n_embd + r] = acc;
}

// Single-token decode steps of Q4_K / Q6_K experts (engine.gpu.moe takes these where the dense matvecs' contract holds
// for every expert matrix; other steps keep halo_moe_glu / _down above): the decode matvecs' scheme, MV_R rows per
// warp with their loads in flight together and a trip ahead, each activation load serving all of a warp's rows.
// halo_moe_glu / _down gave each row a warp of its own, reading its super-blocks in turn (down: one expert after
// another), so a warp waited a full memory latency per trip. Unlike the dense matvecs, no L2 prefetch before the
// wait: which rows to read comes from the router's ids, written by the kernel before.

// halo_moe_glu's A [T * k, n_ff] for pair p = blockIdx.y: expert ids[p]'s gate and up rows as glu_mv's, K split over
// kw warps. Grid: (ceil(n_ff / (MV_R * MV_WARPS / kw)), T * k); block: 32 * MV_WARPS. Contract: n_ff % MV_R == 0.
HALO_KERNEL void halo_moe_glu_mv_t1(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                                    i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, const i32* ids, i32 k,
                                    const float* bg, const float* bu, float alpha, float limit, float* A, i32 kw) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[MV_WARPS * 2 * MV_R];
    int warp = threadIdx.x >> 5, kc = warp % kw, p = blockIdx.y;
    int row0 = (blockIdx.x * (MV_WARPS / kw) + warp / kw) * MV_R;
    bool valid = row0 < n_ff;
    size_t e0 = (size_t)ids[p] * n_ff + (valid ? row0 : 0);     // row row0 of expert ids[p] in the stacks
    const unsigned char* rg[MV_R];
    const unsigned char* ru[MV_R];
    #pragma unroll
    for (int r = 0; r < MV_R; r++) {
        rg[r] = wg + (e0 + r) * rb_g;
        ru[r] = wu + (e0 + r) * rb_u;
    }
    const float* xr[1] = {X + (size_t)(p / k) * K};
    float acc[2 * MV_R][1];
    glu_mv_dots<1>(tg, rg, tu, ru, K, xr, kc, kw, acc, red);
    if (!valid || kc || (threadIdx.x & 31)) return;
    #pragma unroll
    for (int r = 0; r < MV_R; r++)
        A[(size_t)p * n_ff + row0 + r] = expert_glu(acc[r][0] + (bg ? bg[e0 + r] : 0.0f),
                                                    acc[MV_R + r][0] + (bu ? bu[e0 + r] : 0.0f), act, alpha, limit);
}

// halo_moe_down's Y [T, n_embd] for token t = blockIdx.y: the block's MV_R rows of every routed expert, warp w taking
// the slots j = w, w + warps, .. (each a one-warp mv_dot of expert ids[t * k + j]'s rows with that pair's A row),
// then the weighted sum over the slots in a fixed order (each warp's slots in turn, then the warps in turn: the same
// sum every run). Grid: (n_embd / MV_R, T); block: 32 x 1..32 warps. Contract: n_embd % MV_R == 0.
HALO_KERNEL void halo_moe_down_mv_t1(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A, i32 F,
                                     const i32* ids, const float* w, i32 k, const float* bd, float* Y) {
    GRID_DEPENDENCY_SYNC();
    __shared__ float red[32 * MV_R];
    int warp = threadIdx.x >> 5, warps = blockDim.x >> 5, t = blockIdx.y, row0 = blockIdx.x * MV_R;
    float sum[MV_R];
    #pragma unroll
    for (int r = 0; r < MV_R; r++) sum[r] = 0.0f;
    for (int j = warp; j < k; j += warps) {
        size_t p = (size_t)t * k + j, e0 = (size_t)ids[p] * n_embd + row0;
        const unsigned char* rp[MV_R];
        float acc[MV_R][1];
        #pragma unroll
        for (int r = 0; r < MV_R; r++) { rp[r] = wd + (e0 + r) * rb_d; acc[r][0] = 0.0f; }
        const float* xr[1] = {A + p * F};
        mv_dot<MV_R, 1>(td, rp, F, xr, 0, 1, acc);
        #pragma unroll
        for (int r = 0; r < MV_R; r++) sum[r] += w[p] * (warp_sum(acc[r][0]) + (bd ? bd[e0 + r] : 0.0f));
    }
    if ((threadIdx.x & 31) == 0)
        #pragma unroll
        for (int r = 0; r < MV_R; r++) red[warp * MV_R + r] = sum[r];
    __syncthreads();
    if (threadIdx.x >= MV_R) return;
    float y = 0.0f;
    for (int v = 0; v < warps; v++) y += red[v * MV_R + threadIdx.x];
    Y[(size_t)t * n_embd + row0 + threadIdx.x] = y;
}

// Steps of several tokens (prefill, decode batches): the (token, slot) pairs grouped by expert, so each expert row
// is decoded once per tile of its tokens instead of once per pair. halo_moe_sort: a counting sort of the P = T * k
// pairs by expert id: offsets[e] .. offsets[e + 1] index `order` (pair ids of expert e) and `order_tok` (their
// tokens). With `tiles` (the tensor-core kernels below): each expert's pairs cut into tiles of nt, tile i as
// (expert, first index into order) at tiles[2 i], tiles[2 i + 1], experts in order; entries from the last tile to
// max_tiles get expert -1 (the launch's grid has max_tiles, fixed by T, so a captured graph replays any routing).
// Grid: 1; block: 256 (n_expert <= 256). Order inside an expert is arbitrary; every result is per pair.
HALO_KERNEL void halo_moe_sort(const i32* ids, i32 P, i32 k, i32 n_expert, i32* offsets, i32* order,
                               i32* order_tok, i32 nt, i32* tiles, i32 max_tiles) {
    GRID_DEPENDENCY_SYNC();
    __shared__ int count[256];
    __shared__ int cursor[256];
    __shared__ int start[257];                    // expert e's first pair in order (start[n_expert]: P) ...
    __shared__ int first[257];                    // ... and its first tile (first[n_expert]: the tiles in all)
    for (int e = threadIdx.x; e < 256; e += blockDim.x) count[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < P; p += blockDim.x) atomicAdd(&count[ids[p]], 1);
    __syncthreads();
    if (threadIdx.x == 0) {
        int run = 0, tile = 0;
        for (int e = 0; e < n_expert; e++) {
            offsets[e] = start[e] = cursor[e] = run;
            first[e] = tile;
            run += count[e];
            if (tiles) tile += (count[e] + nt - 1) / nt;
        }
        offsets[n_expert] = start[n_expert] = run;
        first[n_expert] = tile;
    }
    __syncthreads();
    if (tiles) {
        for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
            for (int i = first[e]; i < first[e + 1]; i++) {
                tiles[2 * i] = e;
                tiles[2 * i + 1] = start[e] + (i - first[e]) * nt;
            }
        for (int i = first[n_expert] + threadIdx.x; i < max_tiles; i += blockDim.x) tiles[2 * i] = -1;
    }
    for (int p = threadIdx.x; p < P; p += blockDim.x) {
        int at = atomicAdd(&cursor[ids[p]], 1);
        order[at] = p;
        order_tok[at] = p / k;
    }
}

#define MOE_NT 8
// A[p, r] for the pairs of expert e = blockIdx.y, MOE_NT at a time (as halo_moe_glu).
// Grid: (ceil(n_ff / warps), n_expert).
HALO_KERNEL void halo_moe_glu_grouped(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu,
                                      i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K,
                                      const i32* offsets, const i32* order, const i32* order_tok,
                                      const float* bg, const float* bu, float alpha, float limit, float* A) {
    GRID_DEPENDENCY_SYNC();
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int e = blockIdx.y;
    if (r >= n_ff) return;
    float bias_g = bg ? bg[(size_t)e * n_ff + r] : 0.0f, bias_u = bu ? bu[(size_t)e * n_ff + r] : 0.0f;
    const unsigned char* rg[1] = {wg + ((size_t)e * n_ff + r) * rb_g};
    const unsigned char* ru[1] = {wu + ((size_t)e * n_ff + r) * rb_u};
    for (int c0 = offsets[e]; c0 < offsets[e + 1]; c0 += MOE_NT) {
        int n = min(MOE_NT, offsets[e + 1] - c0);
        float g[1][MOE_NT], u[1][MOE_NT];
        #pragma unroll
        for (int t = 0; t < MOE_NT; t++) { g[0][t] = 0.0f; u[0][t] = 0.0f; }
        rows_dot_any<1, MOE_NT>(tg, rg, K, X, order_tok + c0, 0, n, g);
        rows_dot_any<1, MOE_NT>(tu, ru, K, X, order_tok + c0, 0, n, u);
        #pragma unroll
        for (int t = 0; t < MOE_NT; t++) {
            float gs = warp_sum(g[0][t]) + bias_g, us = warp_sum(u[0][t]) + bias_u;
            if ((threadIdx.x & 31) == 0 && t < n)
                A[(size_t)order[c0 + t] * n_ff + r] = expert_glu(gs, us, act, alpha, limit);
        }
    }
}

// D[p, r] = down_e[r] . A[p] + bd[e, r] for the pairs of expert e = blockIdx.y (bd null: no bias).
// Grid: (ceil(n_embd / warps), n_expert).
HALO_KERNEL void halo_moe_down_grouped(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A,
                                       i32 F, const i32* offsets, const i32* order, const float* bd, float* D) {
    GRID_DEPENDENCY_SYNC();
    int r = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    int e = blockIdx.y;
    if (r >= n_embd) return;
    float bias = bd ? bd[(size_t)e * n_embd + r] : 0.0f;
    const unsigned char* rd[1] = {wd + ((size_t)e * n_embd + r) * rb_d};
    for (int c0 = offsets[e]; c0 < offsets[e + 1]; c0 += MOE_NT) {
        int n = min(MOE_NT, offsets[e + 1] - c0);
        float d[1][MOE_NT];
        #pragma unroll
        for (int t = 0; t < MOE_NT; t++) d[0][t] = 0.0f;
        rows_dot_any<1, MOE_NT>(td, rd, F, A, order + c0, 0, n, d);
        #pragma unroll
        for (int t = 0; t < MOE_NT; t++) {
            float s = warp_sum(d[0][t]) + bias;
            if ((threadIdx.x & 31) == 0 && t < n) D[(size_t)order[c0 + t] * n_embd + r] = s;
        }
    }
}

// Y[t, r] = sum_j w[t, j] * D[t * k + j, r], slots in order (deterministic). Grid: ceil(T * n_embd / 256).
HALO_KERNEL void halo_moe_combine(const float* D, const float* w, i32 k, i32 T, i32 n_embd, float* Y) {
    GRID_DEPENDENCY_SYNC();
    int i = HALO_GLOBAL_ID;
    if (i >= T * n_embd) return;
    int t = i / n_embd, r = i - t * n_embd;
    float acc = 0.0f;
    for (int j = 0; j < k; j++) acc += w[t * k + j] * D[((size_t)t * k + j) * n_embd + r];
    Y[i] = acc;
}

// The grouped products on NVIDIA tensor cores (CUDA sm_80+; engine.gpu.moe takes them where every expert matrix meets
// the tn kernels' contract: Q4_K / Q6_K, K % 256 == 0, rows % 16 == 0): the tn kernels' k loop, each warp's 16 rows
// the A operand of TF32 MMAs (weights exact, activations head + tail) and each super-block's activations staged in
// shared memory once for the block's 8 warps, over a tile of up to 8 NJ pairs of one expert (halo_moe_sort's
// tiles; blocks of tile entries past the last exit). The SIMT kernels above give each expert row a warp that re-reads
// its tokens' activations through L1 (90% of a Qwen3-30B-A3B-shaped prefill step). Outputs as theirs: A and D rows per
// pair. Grid: (ceil(rows / (16 TN_WARPS)), max_tiles); block: 32 * TN_WARPS. HIP: compiles to nothing.
#if HALO_TC
// This warp's rows (row0 ..: rp[i] = rows g, g + 8 of stack `w` at expert e) and whether it has any
__device__ __forceinline__ bool moe_tn_rows(const unsigned char* w, int rb, int rows, int e, int row0,
                                            const unsigned char** rp) {
    int g = (threadIdx.x & 31) >> 2;
    bool busy = row0 < rows;
    size_t r = (size_t)e * rows + (busy ? row0 : 0);
    rp[0] = w + (r + g) * rb;
    rp[1] = w + (r + g + 8) * rb;
    return busy;
}

template <int NJ>
__device__ void moe_glu_tn(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                           i32 n_ff, i32 act, const float* X, i32 K, const i32* offsets, const i32* order,
                           const i32* order_tok, const i32* tiles, const float* bg, const float* bu, float alpha,
                           float limit, float* A) {
    int e = tiles[2 * blockIdx.y], c0 = tiles[2 * blockIdx.y + 1];
    if (e < 0) return;                                  // the whole block: past the last tile
    int n = min(8 * NJ, offsets[e + 1] - c0), row0 = (blockIdx.x * TN_WARPS + (threadIdx.x >> 5)) * TN_ROWS;
    const unsigned char *rg[2], *ru[2];
    bool busy = moe_tn_rows(wg, rb_g, n_ff, e, row0, rg);
    moe_tn_rows(wu, rb_u, n_ff, e, row0, ru);
    float acc[2][NJ][4];
    tn_glu_acc<NJ>(tg, rg, tu, ru, busy, tn_x_row<NJ>(X, order_tok + c0, K, 0, n), 0, K >> 8, acc);
    if (!busy) return;
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int v = 0; v < 4; v++) {
            int row = row0 + tp_row(0, v), tok = tp_tok(0, j, v);
            if (tok >= n) continue;
            size_t er = (size_t)e * n_ff + row;
            A[(size_t)order[c0 + tok] * n_ff + row] = expert_glu(acc[0][j][v] + (bg ? bg[er] : 0.0f),
                                                                 acc[1][j][v] + (bu ? bu[er] : 0.0f), act, alpha, limit);
        }
}

template <int NJ>
__device__ void moe_down_tn(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A, i32 F,
                            const i32* offsets, const i32* order, const i32* tiles, const float* bd, float* D) {
    int e = tiles[2 * blockIdx.y], c0 = tiles[2 * blockIdx.y + 1];
    if (e < 0) return;
    int n = min(8 * NJ, offsets[e + 1] - c0), row0 = (blockIdx.x * TN_WARPS + (threadIdx.x >> 5)) * TN_ROWS;
    const unsigned char* rd[2];
    bool busy = moe_tn_rows(wd, rb_d, n_embd, e, row0, rd);
    float acc[NJ][4];
    tn_rows_acc<NJ>(td, rd, busy, tn_x_row<NJ>(A, order + c0, F, 0, n), 0, F >> 8, acc);
    if (!busy) return;
    #pragma unroll
    for (int j = 0; j < NJ; j++)
        #pragma unroll
        for (int v = 0; v < 4; v++) {
            int row = row0 + tp_row(0, v), tok = tp_tok(0, j, v);
            if (tok >= n) continue;
            D[(size_t)order[c0 + tok] * n_embd + row] = acc[j][v] + (bd ? bd[(size_t)e * n_embd + row] : 0.0f);
        }
}
#endif

// The grouped products on the SIMT path (HIP; CUDA without tensor cores), over the same tiles: the batched-decode bq
// kernels' scheme, a block of BQ_ROWS rows of expert e (8 lanes a row, wide K-quant loads) with each super-block's
// activations of the tile's pairs staged in shared memory once for all of them, where halo_moe_*_grouped give each
// row a warp that re-reads its tokens' activations through L1. Q4_K / Q6_K rows, K % 256 == 0.
// Grid: (ceil(rows / BQ_ROWS), max_tiles); block: 32 * BQ_WARPS. Inlined into their entries: hiprtc (ROCm 5's LLVM)
// gives the shared arrays of functions it keeps out of line to every kernel of the module, and with these two the
// sum passed the 64 KB of LDS (78,400 bytes in 15 kernels for gfx1030).
template <int NT>
__device__ __forceinline__ void moe_glu_bq(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu,
                                           i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K,
                                           const i32* offsets, const i32* order, const i32* order_tok,
                                           const i32* tiles, const float* bg, const float* bu, float alpha,
                                           float limit, float* A) {
    __shared__ __align__(16) float xs[NT * BQ_XLD];
    int e = tiles[2 * blockIdx.y], c0 = tiles[2 * blockIdx.y + 1];
    if (e < 0) return;                                  // the whole block: past the last tile
    int n = min(NT, offsets[e + 1] - c0), lane = threadIdx.x & 31, m = lane & 7;
    int r = blockIdx.x * BQ_ROWS + 4 * (threadIdx.x >> 5) + (lane >> 3);
    bool valid = r < n_ff;
    size_t er = (size_t)e * n_ff + (valid ? r : 0);
    const unsigned char* rg = wg + er * rb_g;
    const unsigned char* ru = wu + er * rb_u;
    float g[NT], u[NT];
    bq_glu_acc<NT>(tg, rg, tu, ru, valid, X, order_tok + c0, K, n, 0, xs, g, u);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        float gs = group8_sum(g[t]), us = group8_sum(u[t]);
        if (valid && m == 0 && t < n)
            A[(size_t)order[c0 + t] * n_ff + r] = expert_glu(gs + (bg ? bg[er] : 0.0f), us + (bu ? bu[er] : 0.0f), act,
                                                             alpha, limit);
    }
}

template <int NT>
__device__ __forceinline__ void moe_down_bq(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A,
                                            i32 F, const i32* offsets, const i32* order, const i32* tiles,
                                            const float* bd, float* D) {
    __shared__ __align__(16) float xs[NT * BQ_XLD];
    int e = tiles[2 * blockIdx.y], c0 = tiles[2 * blockIdx.y + 1];
    if (e < 0) return;
    int n = min(NT, offsets[e + 1] - c0), lane = threadIdx.x & 31, m = lane & 7;
    int r = blockIdx.x * BQ_ROWS + 4 * (threadIdx.x >> 5) + (lane >> 3);
    bool valid = r < n_embd;
    size_t er = (size_t)e * n_embd + (valid ? r : 0);
    const unsigned char* rd = wd + er * rb_d;
    float acc[NT];
    bq_rows_acc<NT>(td, rd, valid, A, order + c0, F, n, 0, 0, F >> 8, xs, acc);
    #pragma unroll
    for (int t = 0; t < NT; t++) {
        float v = group8_sum(acc[t]);
        if (valid && m == 0 && t < n) D[(size_t)order[c0 + t] * n_embd + r] = v + (bd ? bd[er] : 0.0f);
    }
}

#define MOE_BQ_ENTRIES(GLU, DOWN, NT)                                                                       \
HALO_KERNEL void GLU(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,   \
                     i32 n_ff, i32 act, const float* X, i32 K, const i32* offsets, const i32* order,         \
                     const i32* order_tok, const i32* tiles, const float* bg, const float* bu, float alpha,  \
                     float limit, float* A) {                                                               \
    GRID_DEPENDENCY_SYNC();                                                                                 \
    moe_glu_bq<NT>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, offsets, order, order_tok, tiles, bg, bu, alpha, \
                   limit, A);                                                                               \
}                                                                                                           \
HALO_KERNEL void DOWN(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A, i32 F,         \
                      const i32* offsets, const i32* order, const i32* tiles, const float* bd, float* D) {   \
    GRID_DEPENDENCY_SYNC();                                                                                 \
    moe_down_bq<NT>(wd, td, rb_d, n_embd, A, F, offsets, order, tiles, bd, D);                              \
}
MOE_BQ_ENTRIES(halo_moe_glu_bq_t8, halo_moe_down_bq_t8, 8)
MOE_BQ_ENTRIES(halo_moe_glu_bq_t16, halo_moe_down_bq_t16, 16)

#define MOE_TN_ENTRIES(GLU, DOWN, NJ)                                                                       \
HALO_KERNEL __launch_bounds__(32 * TN_WARPS, 2) void GLU(const unsigned char* wg, i32 tg, const unsigned char* wu, \
        i32 tu, i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, const i32* offsets,            \
        const i32* order, const i32* order_tok, const i32* tiles, const float* bg, const float* bu,          \
        float alpha, float limit, float* A) {                                                               \
    GRID_DEPENDENCY_SYNC();                                                                                 \
    TN_BODY(moe_glu_tn<NJ>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, X, K, offsets, order, order_tok, tiles, bg, bu, \
                           alpha, limit, A));                                                               \
}                                                                                                           \
HALO_KERNEL __launch_bounds__(32 * TN_WARPS, 2) void DOWN(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, \
        const float* A, i32 F, const i32* offsets, const i32* order, const i32* tiles, const float* bd, float* D) { \
    GRID_DEPENDENCY_SYNC();                                                                                 \
    TN_BODY(moe_down_tn<NJ>(wd, td, rb_d, n_embd, A, F, offsets, order, tiles, bd, D));                     \
}
MOE_TN_ENTRIES(halo_moe_glu_tn_t8, halo_moe_down_tn_t8, 1)
MOE_TN_ENTRIES(halo_moe_glu_tn_t16, halo_moe_down_tn_t16, 2)

// Wide steps on tch's f16 tile, "th" (CUDA sm_80+; engine.gpu.moe takes them once a step averages NB pairs an
// expert, e.g. 512 tokens of Qwen3-30B-A3B: 32). The tn kernels above issue two TF32 MMAs per product and read an
// expert's weights once per 16 pairs; here a block runs th_run, tch's k loop (f16 MMAs, integer weight codes exact,
// activations f16 head + tail), over 64 rows of the tile's expert and its up to NB pairs. halo_moe_tile_rows lists,
// per tile y, the tokens (GLU input) and pair ids (down input) of its pairs at y NB .. y NB + NB - 1 (-1 past them).
// The GLU reads X's split (halo_split_f16 of the step's T rows) through the token list (th_run's GATHER); the down
// product's input, A's rows per pair, is split through the pair list, in tile order (a -1 row: zero sums, never read
// otherwise). Outputs as the tn kernels: A and D rows per pair. Contract (host): Q4_K / Q6_K experts, K % 256 == 0,
// n_ff % 32 == 0, n_embd % 64 == 0. Grid: (n_ff / 32 | n_embd / 64, max_tiles); block: 2 NB.

// Entry y nt + i of tok / pair: tile y's pair i's token and pair id (-1 past the tile's pairs, or for a tile entry
// past the last). Grid: max_tiles; block: nt.
HALO_KERNEL void halo_moe_tile_rows(const i32* offsets, const i32* order, const i32* order_tok, const i32* tiles,
                                    i32* tok, i32* pair) {
    GRID_DEPENDENCY_SYNC();
    int y = blockIdx.x, e = tiles[2 * y], at = y * blockDim.x + threadIdx.x;
    int c = e < 0 ? 0 : tiles[2 * y + 1] + threadIdx.x;
    bool in = e >= 0 && c < offsets[e + 1];
    tok[at] = in ? order_tok[c] : -1;
    pair[at] = in ? order[c] : -1;
}

// The tile's expert, first index into order and pairs (n), or false for a tile entry past the last
__device__ __forceinline__ bool moe_tile(const i32* offsets, const i32* tiles, int nt, int* e, int* c0, int* n) {
    *e = tiles[2 * blockIdx.y];
    if (*e < 0) return false;
    *c0 = tiles[2 * blockIdx.y + 1];
    *n = min(nt, offsets[*e + 1] - *c0);
    return true;
}

#if HALO_TC

template <int NB>
__device__ void moe_glu_th(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g, i32 rb_u,
                           i32 n_ff, i32 act, const unsigned short* Xh, const unsigned short* Xl,
                           const unsigned short* S, const i32* E, i32 K, i32 ls, const i32* tile_tok,
                           const i32* offsets, const i32* order, const i32* tiles, const float* bg,
                           const float* bu, float alpha, float limit, float* A) {
    int e, c0, n;
    if (!moe_tile(offsets, tiles, NB, &e, &c0, &n)) return;     // the whole block
    constexpr int RT = 128 / NB;                       // th_run's rows a thread: tile rows t / 4 + NB / 2 i
    int row0 = blockIdx.x * (TP_BM / 2), tok0 = blockIdx.y * NB;
    int warp = threadIdx.x >> 5, mr0 = 16 * (warp & 1), nw = 32 * (warp >> 1);
    const unsigned char* rp[RT];
    bool up[RT];
    #pragma unroll
    for (int i = 0; i < RT; i++) {                    // tile rows 0-31: gate rows row0 .., 32-63: up rows row0 ..
        int r = (threadIdx.x >> 2) + (NB / 2) * i;
        up[i] = r >= 32;
        size_t er = (size_t)e * n_ff + row0 + (r & 31);
        rp[i] = up[i] ? wu + er * rb_u : wg + er * rb_g;
    }
    __shared__ ThShared<NB> sm;
    float acc[2][4][4];
    bool g4 = tg == T_Q4_K, u4 = tu == T_Q4_K;
    int T = tok0 + n;
#define MOE_TH_GLU_RUN(G4, U4) th_run<NB, G4, U4, true>(sm, rp, up, Xh, Xl, S, K, T, ls, tok0, 0, K, mr0, mr0 + 32, \
                                                        nw, acc, tile_tok)
    if (g4 && u4) MOE_TH_GLU_RUN(true, true);
    else if (g4) MOE_TH_GLU_RUN(true, false);
    else if (u4) MOE_TH_GLU_RUN(false, true);
    else MOE_TH_GLU_RUN(false, false);
#undef MOE_TH_GLU_RUN
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int v = 0; v < 4; v++) {
            int i = tp_tok(nw, j, v), row = row0 + tp_row(mr0, v);
            if (i >= n) continue;
            int sh = E[tile_tok[tok0 + i]];                // the token's exponent in X's split
            size_t er = (size_t)e * n_ff + row;
            A[(size_t)order[c0 + i] * n_ff + row] = expert_glu(ldexpf(acc[0][j][v], sh) + (bg ? bg[er] : 0.0f),
                                                               ldexpf(acc[1][j][v], sh) + (bu ? bu[er] : 0.0f), act,
                                                               alpha, limit);
        }
}

template <int NB>
__device__ void moe_down_th(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const unsigned short* Xh,
                            const unsigned short* Xl, const unsigned short* S, const i32* E, i32 F, i32 ls,
                            const i32* offsets, const i32* order, const i32* tiles, const float* bd, float* D) {
    int e, c0, n;
    if (!moe_tile(offsets, tiles, NB, &e, &c0, &n)) return;
    constexpr int RT = 128 / NB;
    int row0 = blockIdx.x * TP_BM, tok0 = blockIdx.y * NB;
    int warp = threadIdx.x >> 5, mr0 = 32 * (warp & 1), nw = 32 * (warp >> 1);
    const unsigned char* rp[RT];
    const bool up[RT] = {};
    #pragma unroll
    for (int i = 0; i < RT; i++)
        rp[i] = wd + ((size_t)e * n_embd + row0 + (threadIdx.x >> 2) + (NB / 2) * i) * rb_d;
    __shared__ ThShared<NB> sm;
    float acc[2][4][4];
    int T = tok0 + n;
    if (td == T_Q4_K) th_run<NB, true, true>(sm, rp, up, Xh, Xl, S, F, T, ls, tok0, 0, F, mr0, mr0 + 16, nw, acc);
    else th_run<NB, false, false>(sm, rp, up, Xh, Xl, S, F, T, ls, tok0, 0, F, mr0, mr0 + 16, nw, acc);
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int v = 0; v < 4; v++) {
            int i = tp_tok(nw, j, v);
            if (i >= n) continue;
            int sh = E[tok0 + i];
            #pragma unroll
            for (int m = 0; m < 2; m++) {
                int row = row0 + tp_row(mr0 + 16 * m, v);
                D[(size_t)order[c0 + i] * n_embd + row] = ldexpf(acc[m][j][v], sh)
                                                          + (bd ? bd[(size_t)e * n_embd + row] : 0.0f);
            }
        }
}
#endif

// NB pairs a tile, 2 NB threads, BLOCKS blocks an SM (at most 128 registers, as tch)
#define MOE_TH_ENTRIES(GLU, DOWN, NB, BLOCKS)                                                               \
HALO_KERNEL __launch_bounds__(2 * NB, BLOCKS) void GLU(const unsigned char* wg, i32 tg, const unsigned char* wu, \
        i32 tu, i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const unsigned short* Xh, const unsigned short* Xl,    \
        const unsigned short* S, const i32* E, i32 K, i32 ls, const i32* tile_tok, const i32* offsets,      \
        const i32* order, const i32* tiles, const float* bg, const float* bu, float alpha, float limit,     \
        float* A) {                                                                                         \
    GRID_DEPENDENCY_SYNC();                                                                                 \
    TH_BODY(moe_glu_th<NB>(wg, tg, wu, tu, rb_g, rb_u, n_ff, act, Xh, Xl, S, E, K, ls, tile_tok, offsets, order, \
                           tiles, bg, bu, alpha, limit, A));                                                \
}                                                                                                           \
HALO_KERNEL __launch_bounds__(2 * NB, BLOCKS) void DOWN(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, \
        const unsigned short* Xh, const unsigned short* Xl, const unsigned short* S, const i32* E, i32 F,   \
        i32 ls, const i32* offsets, const i32* order, const i32* tiles, const float* bd, float* D) {        \
    GRID_DEPENDENCY_SYNC();                                                                                 \
    TH_BODY(moe_down_th<NB>(wd, td, rb_d, n_embd, Xh, Xl, S, E, F, ls, offsets, order, tiles, bd, D));      \
}
MOE_TH_ENTRIES(halo_moe_glu_th_t32, halo_moe_down_th_t32, 32, 8)
MOE_TH_ENTRIES(halo_moe_glu_th_t64, halo_moe_down_th_t64, 64, 4)

// ---------------------------------------------------------------------------------------------------------
// Expert products of any weight type in tiles of MOE_WIDE_NT pairs: "tp" (CUDA sm_80+) and "gt" (every GPU), for the
// experts the tiles above do not take (gpt-oss's MXFP4, a Q8_0 or Q4_0 file's). The dense prefill tiles' k loops run
// over rows of one expert and a tile of its pairs, whose activations are gathered by token (GLU) or by pair (down)
// through halo_moe_sort's lists, as the dense tiles gather rows through xrow: tp is tcp's (3xTF32, 64 rows, the
// next stage's loads in flight), gt is gt's (FMAs from shared memory, 32 rows). halo_moe_*_grouped gave every expert
// row a warp that re-read 8 pairs' activations at a time: 93% of a gpt-oss-20b-shaped 2,048-token step (H100).
// Outputs as the kernels above: A and D rows per pair. Contract (host): K % 64 == 0 for both products (gt's k
// stage), n_ff % 32 == 0, n_embd % 64 == 0. Grid: (n_ff / 32 | n_embd / 64 (tp) or / 32 (gt), max_tiles);
// block: 128.
#define MOE_WIDE_NT 64
static_assert(TP_BN == MOE_WIDE_NT && GT_BN == MOE_WIDE_NT, "a tile of pairs is one block's tokens");

HALO_KERNEL __launch_bounds__(128) void halo_moe_glu_tp(const unsigned char* wg, i32 tg, const unsigned char* wu,
        i32 tu, i32 rb_g, i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, const i32* offsets, const i32* order,
        const i32* order_tok, const i32* tiles, const float* bg, const float* bu, float alpha, float limit, float* A) {
    GRID_DEPENDENCY_SYNC();
#if HALO_TC
    __shared__ __align__(16) u32 Ws[TP_BM * TP_LDW];
    __shared__ __align__(16) float Xs0[TP_BN * TP_LDX];
    __shared__ __align__(16) float Xs1[TP_BN * TP_LDX];
    int ex, c0, n;
    if (!moe_tile(offsets, tiles, MOE_WIDE_NT, &ex, &c0, &n)) return;
    int row0 = blockIdx.x * (TP_BM / 2);               // tile rows 0-31: gate rows row0 .., 32-63: up rows row0 ..
    int warp = threadIdx.x >> 5, mr0 = 16 * (warp & 1), nw = 32 * (warp >> 1);
    int xo[4];
    tp_x_rows(order_tok + c0, K, n, 0, xo);
    float acc[2][4][4];                                // [gate | up][n8 tile][fragment]
    tp_zero(acc);
    size_t er = (size_t)ex * n_ff + row0 + (threadIdx.x >> 2);
    tp_loop(wg + er * rb_g, tg, wu + er * rb_u, tu, X, xo, 0, K, mr0, mr0 + 32, nw, Ws, Xs0, Xs1, acc);
    #pragma unroll
    for (int j = 0; j < 4; j++)
        #pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = row0 + tp_row(mr0, e), i = tp_tok(nw, j, e);
            if (i >= n) continue;
            size_t b = (size_t)ex * n_ff + row;
            A[(size_t)order[c0 + i] * n_ff + row] = expert_glu(acc[0][j][e] + (bg ? bg[b] : 0.0f),
                                                               acc[1][j][e] + (bu ? bu[b] : 0.0f), act, alpha, limit);
        }
#endif
}

HALO_KERNEL __launch_bounds__(128) void halo_moe_down_tp(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd,
        const float* A, i32 F, const i32* offsets, const i32* order, const i32* tiles, const float* bd, float* D) {
    GRID_DEPENDENCY_SYNC();
#if HALO_TC
    __shared__ __align__(16) u32 Ws[TP_BM * TP_LDW];
    __shared__ __align__(16) float Xs0[TP_BN * TP_LDX];
    __shared__ __align__(16) float Xs1[TP_BN * TP_LDX];
    int ex, c0, n;
    if (!moe_tile(offsets, tiles, MOE_WIDE_NT, &ex, &c0, &n)) return;
    int row0 = blockIdx.x * TP_BM;
    int warp = threadIdx.x >> 5, mr0 = 32 * (warp & 1), nw = 32 * (warp >> 1);
    int xo[4];
    tp_x_rows(order + c0, F, n, 0, xo);
    float acc[2][4][4];
    tp_zero(acc);
    const unsigned char* rows = wd + ((size_t)ex * n_embd + row0) * rb_d;
    int r = threadIdx.x >> 2;
    tp_loop(rows + (size_t)r * rb_d, td, rows + (size_t)(r + 32) * rb_d, td, A, xo, 0, F, mr0, mr0 + 16, nw,
            Ws, Xs0, Xs1, acc);
    #pragma unroll
    for (int m = 0; m < 2; m++)
        #pragma unroll
        for (int j = 0; j < 4; j++)
            #pragma unroll
            for (int e = 0; e < 4; e++) {
                int row = row0 + tp_row(mr0 + 16 * m, e), i = tp_tok(nw, j, e);
                if (i >= n) continue;
                D[(size_t)order[c0 + i] * n_embd + row] = acc[m][j][e] + (bd ? bd[(size_t)ex * n_embd + row] : 0.0f);
            }
#endif
}

HALO_KERNEL void halo_moe_glu_gt(const unsigned char* wg, i32 tg, const unsigned char* wu, i32 tu, i32 rb_g,
                                 i32 rb_u, i32 n_ff, i32 act, const float* X, i32 K, const i32* offsets,
                                 const i32* order, const i32* order_tok, const i32* tiles, const float* bg,
                                 const float* bu, float alpha, float limit, float* A) {
    GRID_DEPENDENCY_SYNC();
    __shared__ __align__(16) float Wg[GT_BK * GT_WS];
    __shared__ __align__(16) float Wu[GT_BK * GT_WS];
    __shared__ __align__(16) float Xs[GT_BK * GT_XS];
    int ex, c0, n;
    if (!moe_tile(offsets, tiles, MOE_WIDE_NT, &ex, &c0, &n)) return;
    size_t er0 = (size_t)ex * n_ff + blockIdx.x * GT_BM;
    const unsigned char* rg = wg + er0 * rb_g;
    const unsigned char* ru = wu + er0 * rb_u;
    float ag[4][4], au[4][4];
    gt_glu_loop(tg, rg, rb_g, tu, ru, rb_u, X, order_tok + c0, K, n, 0, Wg, Wu, Xs, ag, au);
    int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    #pragma unroll
    for (int t = 0; t < 4; t++) {
        int i = 4 * tx + t;
        if (i >= n) continue;
        float* out = A + (size_t)order[c0 + i] * n_ff + blockIdx.x * GT_BM;
        #pragma unroll
        for (int r = 0; r < 4; r++) {
            size_t b = er0 + 4 * ty + r;
            out[4 * ty + r] = expert_glu(ag[r][t] + (bg ? bg[b] : 0.0f), au[r][t] + (bu ? bu[b] : 0.0f), act, alpha,
                                         limit);
        }
    }
}

HALO_KERNEL void halo_moe_down_gt(const unsigned char* wd, i32 td, i32 rb_d, i32 n_embd, const float* A, i32 F,
                                  const i32* offsets, const i32* order, const i32* tiles, const float* bd,
                                  float* D) {
    GRID_DEPENDENCY_SYNC();
    __shared__ __align__(16) float Ws[GT_BK * GT_WS];
    __shared__ __align__(16) float Xs[GT_BK * GT_XS];
    int ex, c0, n;
    if (!moe_tile(offsets, tiles, MOE_WIDE_NT, &ex, &c0, &n)) return;
    size_t er0 = (size_t)ex * n_embd + blockIdx.x * GT_BM;
    const unsigned char* rows = wd + er0 * rb_d;
    float acc[4][4];
    gt_loop(td, rows, rb_d, A, order + c0, F, n, 0, Ws, Xs, acc);
    int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
    #pragma unroll
    for (int t = 0; t < 4; t++) {
        int i = 4 * tx + t;
        if (i >= n) continue;
        float* out = D + (size_t)order[c0 + i] * n_embd + blockIdx.x * GT_BM;
        #pragma unroll
        for (int r = 0; r < 4; r++) out[4 * ty + r] = acc[r][t] + (bd ? bd[er0 + 4 * ty + r] : 0.0f);
    }
}
