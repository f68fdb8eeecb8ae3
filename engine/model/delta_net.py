"""Gated DeltaNet (Qwen3.5's linear-attention layers) on the CPU, numpy float32.

Per sequence and layer the run state is
- conv state  [K - 1, C]: the last K - 1 inputs of the depthwise causal conv over the C = q|k|v channels;
- delta state [Hv, Dk, Dv]: the recurrent matrix S of every value head.
Both start at zero when a sequence's step begins at position 0 (a new or a recomputed sequence), so a
preempted sequence needs no saved state: recomputing its tokens rebuilds it.

The delta rule, per value head with key head h % Hk (llama.cpp's tiled head order, which its converter
writes), q and k L2-normalised and q scaled by 1/sqrt(Dk), decay a_t = exp(g_t), rate beta_t:
    S_t = a_t S_{t-1} + k_t (beta_t (v_t - (a_t S_{t-1})^T k_t))^T        o_t = S_t^T q_t
A step with one token of a sequence uses that recurrence; a longer one uses the chunked form (chunks of
64, the WY/UT representation of transformers' torch_chunk_gated_delta_rule): the same numbers in a few
matrix products per chunk instead of a Python loop per token.
"""
from __future__ import annotations

import numpy as np

CHUNK = 64


def softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(np.float32(0.0), x).astype(np.float32)


def silu(x: np.ndarray) -> np.ndarray:
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))


def l2_normalize(x: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(sum(x^2) + eps) over the last axis (transformers' l2norm, FLA's convention)."""
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + np.float32(eps))


def causal_conv(x: np.ndarray, state: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal conv + SiLU. x [n, C] new inputs, state [K-1, C] the previous inputs, weight [C, K]
    (GGUF ssm_conv1d): out[t] = sum_j window[t + j] * weight[:, j] over window = state | x.
    Returns (out [n, C], new state [K-1, C])."""
    n, k = len(x), weight.shape[1]
    window = np.concatenate([state, x], axis=0)                       # [K-1+n, C]
    out = np.zeros_like(x)
    for j in range(k):
        out += window[j: j + n] * weight[:, j]
    return silu(out), window[len(window) - (k - 1):].copy()


def _expand_heads(x: np.ndarray, hv: int) -> np.ndarray:
    """[n, Hk, D] -> [n, Hv, D]: value head h reads key head h % Hk (tiled, as llama.cpp's ggml_repeat)."""
    return np.tile(x, (1, hv // x.shape[1], 1))


def delta_rule_recurrent(q, k, v, g, beta, state):
    """q, k [n, Hv, Dk] (normalised, q scaled), v [n, Hv, Dv], g/beta [n, Hv], state [Hv, Dk, Dv] (updated in
    place). Returns o [n, Hv, Dv]."""
    out = np.empty_like(v)
    for t in range(len(v)):
        state *= np.exp(g[t])[:, None, None]
        kv_mem = np.einsum("hkv,hk->hv", state, k[t])
        delta = (v[t] - kv_mem) * beta[t][:, None]
        state += k[t][:, :, None] * delta[:, None, :]
        out[t] = np.einsum("hkv,hk->hv", state, q[t])
    return out


def delta_rule_chunked(q, k, v, g, beta, state, chunk: int = CHUNK):
    """The same as delta_rule_recurrent, a chunk of `chunk` tokens at a time (see the module docstring)."""
    n, hv, dk = k.shape
    dv = v.shape[2]
    pad = (-n) % chunk
    if pad:
        q, k, v = (np.concatenate([a, np.zeros((pad,) + a.shape[1:], np.float32)]) for a in (q, k, v))
        g, beta = (np.concatenate([a, np.zeros((pad, hv), np.float32)]) for a in (g, beta))
    nc = (n + pad) // chunk
    # [Hv, nc, C, D] / [Hv, nc, C]
    q, k, v = (a.reshape(nc, chunk, hv, -1).transpose(2, 0, 1, 3) for a in (q, k, v))
    g, beta = (a.reshape(nc, chunk, hv).transpose(2, 0, 1) for a in (g, beta))
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    cum = np.cumsum(g, axis=-1)                                          # log decay from the chunk start
    lower = np.tril(np.ones((chunk, chunk), dtype=bool))
    pair = np.where(lower, np.exp(np.where(lower, cum[..., :, None] - cum[..., None, :], 0.0)), 0.0)
    pair = pair.astype(np.float32)                                       # [Hv, nc, C, C] decay j -> i, i >= j
    # (I + strictly-lower(beta k k^T decay)) is unit lower triangular: solving it applies the in-chunk
    # delta corrections all at once (the UT transform)
    system = np.tril((k_beta @ k.swapaxes(-1, -2)) * pair, -1) + np.eye(chunk, dtype=np.float32)
    new_values = np.linalg.solve(system, v_beta).astype(np.float32)
    k_cumdecay = np.linalg.solve(system, k_beta * np.exp(cum)[..., None]).astype(np.float32)
    intra = (q @ k.swapaxes(-1, -2)) * pair                              # [Hv, nc, C, C]
    q_decayed = q * np.exp(cum)[..., None]
    k_decayed = k * np.exp(cum[..., -1:] - cum)[..., None]
    chunk_decay = np.exp(cum[..., -1])                                   # [Hv, nc]
    out = np.empty((hv, nc, chunk, dv), np.float32)
    for c in range(nc):
        v_new = new_values[:, c] - k_cumdecay[:, c] @ state              # [Hv, C, Dv]
        out[:, c] = q_decayed[:, c] @ state + intra[:, c] @ v_new
        state *= chunk_decay[:, c][:, None, None]
        state += k_decayed[:, c].swapaxes(-1, -2) @ v_new
    return out.transpose(1, 2, 0, 3).reshape(nc * chunk, hv, dv)[:n]


def gated_delta_net(qkv: np.ndarray, z: np.ndarray, b: np.ndarray, a: np.ndarray, lw, config,
                    conv_state: np.ndarray, delta_state: np.ndarray) -> np.ndarray:
    """One sequence's new tokens through one linear-attention layer (after the input projections).
    qkv [n, C], z [n, Hv*Dv], b/a [n, Hv]; conv_state [K-1, C] and delta_state [Hv, Dk, Dv] are this
    sequence's slots, updated in place. Returns the gated-normed output [n, Hv*Dv] (before ssm_out)."""
    c = config
    n, hk, hv, dk, dv = len(qkv), c.ssm_k_heads, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim
    mixed, conv_state[...] = causal_conv(qkv, conv_state, lw.conv)
    q = l2_normalize(mixed[:, : hk * dk].reshape(n, hk, dk), c.norm_eps) * np.float32(dk ** -0.5)
    k = l2_normalize(mixed[:, hk * dk: 2 * hk * dk].reshape(n, hk, dk), c.norm_eps)
    v = mixed[:, 2 * hk * dk:].reshape(n, hv, dv)
    q, k = _expand_heads(q, hv), _expand_heads(k, hv)
    beta = 1.0 / (1.0 + np.exp(-b))
    g = lw.ssm_a * softplus(a + lw.dt_bias)                              # log decay, <= 0
    rule = delta_rule_recurrent if n == 1 else delta_rule_chunked
    o = rule(q, k, v, g.astype(np.float32), beta.astype(np.float32), delta_state)
    # gated RMSNorm per value head: norm(o) * w * silu(z)
    scale = 1.0 / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + np.float32(c.norm_eps))
    o = (o * scale) * lw.ssm_norm * silu(z.reshape(n, hv, dv))
    return o.reshape(n, hv * dv).astype(np.float32)
