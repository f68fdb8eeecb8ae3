"""Compiled (numba) kernels for a layer's work around its products on the CPU path: RMSNorm, rotary embedding,
one decode token's attention over the paged KV cache.

Each is engine.model.cpu_forward's numpy formula (the reference, and the path where numba is missing) as one
call: a SmolLM2 decode step made ~60 RMSNorm and ~60 rotary calls of 9-10 us each in numpy, ~1-2 us compiled
(2-core Zen 3, 2026-12-07). RMSNorm and the rotation give numpy's bits (same operations, same order, no fused
multiply-adds); the decode attention sums in its own order (reassociation allowed; not "no infinities": masks
hold -inf). The activations stay numpy's: numba's tanh / exp are scalar libm calls, ~1.7x slower than numpy's
vector loops on a 1,536-wide row.
numba comes through engine.model.quant_kernels, which points its disk cache at the app's folder before numba
loads.
"""
from __future__ import annotations

import functools

import numpy as np

from engine.model.numba_cache import lean_cache_loads
from engine.model.quant_kernels import CACHE, njit  # numba's, once quant_kernels has pointed its cache folder


@njit(cache=CACHE)
def rms_norm_rows(x, weight, eps, plan, out):
    """x [N, C] float32 -> out [N, C] = each row x / sqrt(mean(x^2) + eps) * weight [C], bit for bit as
    engine.model.cpu_forward.rms_norm computes it (numpy's summation order: `plan` = pairwise_plan(C); float32
    throughout, no fused multiply-adds), so a forward's logits do not move: a sum in another order (or in float64)
    moved the tiny Qwen3.5 Q8_0 golden's chunked-prefill logits 1.0e-4 -> 3.0e-4 from transformers', past its 2e-4."""
    n, c = x.shape
    sums = np.empty(plan.shape[0], np.float32)      # the plan's stack
    for i in range(n):
        top = 0
        for p in range(plan.shape[0]):
            if plan[p, 1]:
                sums[top] = _squares(x[i], plan[p, 0], plan[p, 1])
                top += 1
            else:
                top -= 1
                sums[top - 1] = sums[top - 1] + sums[top]
        scale = np.float32(1.0) / np.sqrt(sums[0] / np.float32(c) + np.float32(eps))
        for j in range(c):
            out[i, j] = (x[i, j] * scale) * weight[j]


@njit(cache=CACHE, inline="always")
def _squares(row, i0, n):
    """The float32 sum of row[i0:i0 + n]^2, n <= 128, as numpy sums a run that short: below 8 values one by one;
    else eight running sums combined as ((0+1)+(2+3))+((4+5)+(6+7)), then the rest one by one."""
    if n < 8:
        s = np.float32(0.0)
        for i in range(i0, i0 + n):
            s += row[i] * row[i]
        return s
    r0 = r1 = r2 = r3 = r4 = r5 = r6 = r7 = np.float32(0.0)   # 0 + a square is that square: numpy's first 8
    end = i0 + n - n % 8
    for i in range(i0, end, 8):
        r0 += row[i] * row[i]
        r1 += row[i + 1] * row[i + 1]
        r2 += row[i + 2] * row[i + 2]
        r3 += row[i + 3] * row[i + 3]
        r4 += row[i + 4] * row[i + 4]
        r5 += row[i + 5] * row[i + 5]
        r6 += row[i + 6] * row[i + 6]
        r7 += row[i + 7] * row[i + 7]
    s = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for i in range(end, i0 + n):
        s += row[i] * row[i]
    return s


@functools.cache
def pairwise_plan(n: int) -> np.ndarray:
    """numpy's pairwise summation of n values (np.add.reduce over a contiguous row) as rms_norm_rows' program, in
    evaluation order: a row (start, length) sums a run of at most 128 values (_squares) onto a stack, a row (0, 0)
    adds the top two. Longer runs split in two, the first half a multiple of 8 long. Built here, in Python,
    because numba's cached code crashed on loading a recursive kernel."""
    def program(start: int, length: int) -> list[tuple[int, int]]:
        if length <= 128:
            return [(start, length)]
        half = length // 2 - (length // 2) % 8
        return [*program(start, half), *program(start + half, length - half), (0, 0)]
    plan = np.array(program(0, n), np.int64)
    plan.flags.writeable = False
    return plan


@njit(cache=CACHE)
def rope_rows(x, cos, sin, rope_dim, neox, out):
    """x [T, heads, D] float32, cos / sin [T, 1, rope_dim / 2] -> out [T, heads, D]: the first rope_dim of each
    head rotated, pairs (i, i + rope_dim / 2) when neox, else (2i, 2i + 1); the rest copied
    (engine.model.cpu_forward.Rope.apply)."""
    T, heads, D = x.shape
    half = rope_dim // 2
    for t in range(T):
        for h in range(heads):
            for d in range(rope_dim, D):
                out[t, h, d] = x[t, h, d]
            for i in range(half):
                ia, ib = (i, i + half) if neox else (2 * i, 2 * i + 1)
                a, b = x[t, h, ia], x[t, h, ib]
                c, s = cos[t, 0, i], sin[t, 0, i]
                out[t, h, ia] = a * c - b * s
                out[t, h, ib] = b * c + a * s


# ---- attention of one new token over the paged KV cache (decode) -------------------------------------------
# numpy needs ~20 small-array calls per layer and sequence for it. Same math as
# engine.model.cpu_forward.CpuModel._attention; float32 throughout, only the
# summation order differs (reassociation allowed; not "no infinities": the mask holds -inf).

@njit(cache=CACHE, fastmath={"reassoc", "contract", "nsz", "arcp"})
def decode_attention(q, k_blocks, v_blocks, blocks, mask, sinks, scale, out):
    """q [H, D] float32 (one token); k_blocks, v_blocks [num_blocks, block_size, Hkv, D] (one layer's cache);
    blocks [>= ceil(L / block_size)] int32 (the sequence's block table); mask [L] float32 additive (0 or -inf;
    L = the context length); sinks [H] float32 (per-head logits in the softmax's denominator) or empty; scale:
    the score factor -> out [H * D] float32. Query head h reads KV head h // (H / Hkv)."""
    H, D = q.shape
    bs, hkv = k_blocks.shape[1], k_blocks.shape[2]
    group = H // hkv
    L = mask.shape[0]
    scores = np.empty((group, L), np.float32)    # the query heads of one KV head: each key and value read once
    acc = np.empty((group, D), np.float32)
    top = np.empty(group, np.float32)
    for g in range(hkv):
        top[:] = -np.inf
        for pos in range(L):
            key = k_blocks[blocks[pos // bs], pos % bs, g]
            for j in range(group):
                s = np.float32(0.0)
                for d in range(D):
                    s += q[g * group + j, d] * key[d]
                s = s * np.float32(scale) + mask[pos]
                scores[j, pos] = s
                top[j] = max(top[j], s)
        for j in range(group):
            h = g * group + j
            if sinks.shape[0]:
                top[j] = max(top[j], sinks[h])
            denominator = np.float32(0.0)
            for pos in range(L):
                e = np.exp(scores[j, pos] - top[j])
                scores[j, pos] = e
                denominator += e
            if sinks.shape[0]:
                denominator += np.exp(sinks[h] - top[j])
            for pos in range(L):
                scores[j, pos] /= denominator
        acc[:] = 0.0
        for pos in range(L):
            value = v_blocks[blocks[pos // bs], pos % bs, g]
            for j in range(group):
                w = scores[j, pos]
                for d in range(D):
                    acc[j, d] += w * value[d]
        for j in range(group):
            h = g * group + j
            out[h * D:(h + 1) * D] = acc[j]


NO_SINKS = np.zeros(0, np.float32)     # decode_attention's `sinks` for models without them (read-only, as
NO_SINKS.flags.writeable = False       # the loader's weights are: numba specialises on the flag)


lean_cache_loads(globals())      # cached kernels are read without numba's implementation registry
