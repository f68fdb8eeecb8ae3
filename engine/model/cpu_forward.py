"""The CPU (numpy, float32) forward pass of every supported architecture, over the shared step contract.

Shapes at the point of use: T tokens in the step, S sequences, E = n_embd, H query heads, Hkv KV heads,
G = H / Hkv, D = head_dim, L = a sequence's context length.
"""
from __future__ import annotations

import numpy as np

from engine.model.arch import rope_attention_factor, rope_inv_freq
from engine.model.blas import default_threads, set_blas_threads
from engine.model.config import ModelConfig
from engine.model.delta_net import gated_delta_net
from engine.model.moe import moe_ffn
from engine.model.quant_matrix import QuantLinear, layer_kernels
from engine.model.step import KVCache, StepInput
from engine.model.weights import LayerWeights, Linear, LinearLayerWeights, Weights

_SQRT_2_OVER_PI = np.float32(np.sqrt(2.0 / np.pi))


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm over the last axis. GGUF stores gemma's (1 + w) already folded into w, so one formula.
    The reference, and the path without numba; CpuModel runs engine.model.layer_kernels.rms_norm_rows."""
    # np.add.reduce / n is np.mean's own arithmetic (same bits) without its Python wrapper: this runs ~60
    # times per decode step
    mean_square = np.add.reduce(np.square(x), axis=-1, keepdims=True) / np.float32(x.shape[-1])
    scale = np.float32(1.0) / np.sqrt(mean_square + np.float32(eps))
    return (x * scale) * weight


def silu(x: np.ndarray) -> np.ndarray:
    return x * (0.5 + 0.5 * np.tanh(0.5 * x))     # x * sigmoid(x), without exp overflow


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(_SQRT_2_OVER_PI * (x + np.float32(0.044715) * x * x * x)))


_ACTIVATIONS = {"silu": silu, "gelu_tanh": gelu_tanh}


def linear(x: np.ndarray, weight: Linear) -> np.ndarray:
    """x [T, in] @ weight[out, in].T -> [T, out]. Quantized weights: engine.model.quant_matrix's kernels.
    Float32, one token: BLAS sgemv over W's rows (a few % faster than an sgemm with one row); more: one
    sgemm with W transposed in place (no copy)."""
    if isinstance(weight, QuantLinear):
        return weight(x)
    if len(x) == 1:
        return (weight @ x[0])[None, :]
    return x @ weight.T


def embed(table: Linear, ids: np.ndarray) -> np.ndarray:
    """Rows `ids` of the token embedding as a new float32 [T, E] array."""
    return table.take(ids) if isinstance(table, QuantLinear) else table[ids]


class Rope:
    """Rotary embedding by `inv_freq` [rope_dim/2] float64 (one row of engine.model.arch.rope_inv_freq, the
    GPU's table too); cos/sin computed per step from positions."""

    def __init__(self, config: ModelConfig, inv_freq: np.ndarray, kernel=None):
        self.inv_freq = inv_freq
        self.kernel = kernel                                   # engine.model.layer_kernels.rope_rows, or None
        self.rope_dim = config.rope_dim
        self.neox = config.rope_style == "neox"
        self.factor = rope_attention_factor(config)            # YaRN's magnitude scale, else 1

    def tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        angles = positions.astype(np.float64)[:, None] * self.inv_freq[None, :]   # [T, rope_dim/2]
        cos, sin = np.cos(angles) * self.factor, np.sin(angles) * self.factor
        return cos.astype(np.float32)[:, None, :], sin.astype(np.float32)[:, None, :]

    def apply(self, x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
        """x [T, heads, D] -> rotated copy. neox pairs (i, i + r/2); normal pairs (2i, 2i + 1). numpy's form is
        the reference, and the path without numba."""
        if self.kernel is not None:
            out = np.empty(x.shape, np.float32)
            self.kernel(x, cos, sin, self.rope_dim, self.neox, out)
            return out
        out = x.copy()
        r = self.rope_dim
        if self.neox:
            a, b = x[..., : r // 2], x[..., r // 2: r]
            out[..., : r // 2] = a * cos - b * sin
            out[..., r // 2: r] = b * cos + a * sin
        else:
            a, b = x[..., 0:r:2], x[..., 1:r:2]
            out[..., 0:r:2] = a * cos - b * sin
            out[..., 1:r:2] = b * cos + a * sin
        return out


class CpuModel:
    """Config + read-only weights; `forward` is re-entrant (all run state lives in the KVCache passed in)."""

    # Steps with fewer tokens are matrix-vector work, bound by memory: one BLAS thread streams the weights
    # as fast as several and cannot be slowed by spinning threads on shared cores (see engine.model.blas).
    MIN_TOKENS_FOR_THREADS = 32

    def __init__(self, config: ModelConfig, weights: Weights, threads: int | None = None):
        self.config = config
        self.weights = weights
        # BLAS threads for prefill-sized steps. Default 1: on a 2-core machine shared with other work, two
        # threads made a 128-token prefill 5x slower (3.2 s vs 0.6 s). HALO_CPU_THREADS=N opts in.
        self.threads = threads or default_threads()
        self.act = _ACTIVATIONS[config.activation]
        # RMSNorm, rotary embedding and one token's attention compiled (numba present), else numpy's
        lk = layer_kernels()
        self._decode_attention = None if lk is None else (lk.decode_attention, lk.NO_SINKS)
        self.norm = rms_norm if lk is None else _compiled_norm(lk)
        self._ropes = {}
        self.layer_rope = []
        inv_freq = rope_inv_freq(config, weights.rope_freqs)            # [n_layers, rope_dim/2]
        for i, key in enumerate(zip(config.rope_theta, config.rope_freq_scale, strict=True)):
            if key not in self._ropes:
                self._ropes[key] = Rope(config, inv_freq[i], None if lk is None else lk.rope_rows)
            self.layer_rope.append(self._ropes[key])

    def new_kv_cache(self, num_blocks: int, block_size: int, state_slots: int = 1) -> KVCache:
        """`state_slots`: sequences that can hold recurrent state at once (hybrid models; else unused)."""
        return KVCache.allocate(self.config, num_blocks, block_size, state_slots=state_slots)

    def forward(self, step: StepInput, kv: KVCache) -> np.ndarray:
        """Runs one step (see engine.model.step for the contract). Returns logits [len(logits_indices), vocab]."""
        c, w = self.config, self.weights
        if step.num_tokens and (step.token_ids.min() < 0 or step.token_ids.max() >= c.vocab_size):
            # e.g. engine.core's PLACEHOLDER_TOKEN_ID (-1): it must be filled in before a CPU step
            raise ValueError(f"step has token ids outside 0..{c.vocab_size - 1} (unresolved placeholders?)")
        set_blas_threads(self.threads if step.num_tokens >= self.MIN_TOKENS_FOR_THREADS else 1)
        x = embed(w.token_embd, step.token_ids)                  # [T, E] (a copy)
        if c.embed_scale != 1.0:
            x *= np.float32(c.embed_scale)
        tables = {id(r): r.tables(step.positions) for r in self._ropes.values()}
        masks = _Masks(step, c.sliding_window)
        for i, layer in enumerate(w.layers):
            rope = self.layer_rope[i]
            x = self._layer(i, layer, x, step, kv, rope, tables[id(rope)], masks.get(c.sliding_layers[i]))
        h = self.norm(x[step.logits_indices], w.output_norm, c.norm_eps)   # [S', E]
        return linear(h, w.output)                                            # [S', vocab]

    def _layer(self, i: int, lw: LayerWeights | LinearLayerWeights, x: np.ndarray, step: StepInput, kv: KVCache,
               rope: Rope, cos_sin, masks: list[np.ndarray]) -> np.ndarray:
        c = self.config
        h = self.norm(x, lw.attn_norm, c.norm_eps)
        if c.layer_kinds[i] == "linear_attention":
            o = self._linear_attention(i, lw, h, step, kv)
        else:
            o = self._attention_block(i, lw, h, step, kv, rope, cos_sin, masks)
        if getattr(lw, "post_attn_norm", None) is not None:
            o = self.norm(o, lw.post_attn_norm, c.norm_eps)
        x = x + o
        h = self.norm(x, lw.ffn_norm, c.norm_eps)
        moe = getattr(lw, "moe", None)
        if moe is not None:
            d = moe_ffn(h, moe, c.n_expert_used, c.expert_activation)   # [T, E]
        else:
            gate_up = linear(h, lw.w_gate_up)                        # [T, 2 n_ff]
            a = self.act(gate_up[:, : c.n_ff]) * gate_up[:, c.n_ff:]
            d = linear(a, lw.w_down)                                 # [T, E]
        if getattr(lw, "post_ffn_norm", None) is not None:
            d = self.norm(d, lw.post_ffn_norm, c.norm_eps)
        return x + d

    def _linear_attention(self, i: int, lw: LinearLayerWeights, h: np.ndarray, step: StepInput,
                          kv: KVCache) -> np.ndarray:
        """Gated DeltaNet over each sequence's tokens, its recurrent state in slot state_slots[s]."""
        c = self.config
        conv_dim, value_dim, hv = c.conv_dim, c.ssm_v_heads * c.ssm_v_dim, c.ssm_v_heads
        proj = linear(h, lw.w_in)                                    # [T, C | Hv Dv | Hv | Hv]
        out = np.empty((len(h), value_dim), np.float32)
        qsl = step.query_start_loc
        for s in range(step.num_seqs):
            t0, t1, slot = int(qsl[s]), int(qsl[s + 1]), int(step.state_slots[s])
            conv_state, delta_state = kv.conv[i][slot], kv.delta[i][slot]
            if step.positions[t0] == 0:                              # a new (or recomputed) sequence
                conv_state[...] = 0.0
                delta_state[...] = 0.0
            p = proj[t0:t1]
            out[t0:t1] = gated_delta_net(p[:, :conv_dim], p[:, conv_dim: conv_dim + value_dim],
                                         p[:, conv_dim + value_dim: conv_dim + value_dim + hv],
                                         p[:, conv_dim + value_dim + hv:], lw, c, conv_state, delta_state)
        return linear(out, lw.wo)

    def _attention_block(self, i: int, lw: LayerWeights, h: np.ndarray, step: StepInput, kv: KVCache, rope: Rope,
                         cos_sin, masks: list[np.ndarray]) -> np.ndarray:
        c = self.config
        T, H, Hkv, D = len(h), c.n_head, c.n_head_kv, c.head_dim
        q_width = 2 * H * D if c.attn_output_gate else H * D
        qkv = linear(h, lw.wqkv)                                     # [T, q_width + 2 Hkv D]
        if lw.bqkv is not None:
            qkv += lw.bqkv
        gate = None
        if c.attn_output_gate:                                       # per head [q_h | gate_h]
            qg = qkv[:, :q_width].reshape(T, H, 2 * D)
            q, gate = qg[..., :D], qg[..., D:].reshape(T, H * D)
        else:
            q = qkv[:, : H * D].reshape(T, H, D)
        k = qkv[:, q_width: q_width + Hkv * D].reshape(T, Hkv, D)
        v = qkv[:, q_width + Hkv * D:].reshape(T, Hkv, D)
        if lw.q_norm is not None:
            q = self.norm(q, lw.q_norm, c.norm_eps)
            k = self.norm(k, lw.k_norm, c.norm_eps)
        q = rope.apply(q, *cos_sin)
        k = rope.apply(k, *cos_sin)
        k_cache = kv.k[i].reshape(-1, Hkv, D)                    # [num_blocks * block_size, Hkv, D] view
        v_cache = kv.v[i].reshape(-1, Hkv, D)
        k_cache[step.slot_mapping] = k
        v_cache[step.slot_mapping] = v
        attn = self._attention(q, kv.k[i], kv.v[i], step, masks, lw.sinks)   # [T, H D]
        if gate is not None:
            attn *= 1.0 / (1.0 + np.exp(-gate))
        o = linear(attn, lw.wo)                                      # [T, E]
        if lw.bo is not None:
            o += lw.bo
        return o

    def _attention(self, q: np.ndarray, k_blocks: np.ndarray, v_blocks: np.ndarray, step: StepInput,
                   masks: list[np.ndarray], sinks: np.ndarray | None = None) -> np.ndarray:
        """`sinks` [H]: per-head logits that join each softmax's denominator and attend to nothing."""
        c = self.config
        H, Hkv, G, D = c.n_head, c.n_head_kv, c.n_group, c.head_dim
        out = np.empty((len(q), H * D), dtype=np.float32)
        bs = k_blocks.shape[1]
        qsl = step.query_start_loc
        for s in range(step.num_seqs):
            t0, t1, L = int(qsl[s]), int(qsl[s + 1]), int(step.seq_lens[s])
            n = t1 - t0
            blocks = step.block_tables[s, : -(-L // bs)]
            if n == 1 and self._decode_attention is not None:    # a decode token: one compiled call
                kernel, no_sinks = self._decode_attention
                kernel(q[t0], k_blocks, v_blocks, np.ascontiguousarray(blocks, dtype=np.int32), masks[s][0],
                       no_sinks if sinks is None else sinks, c.attn_scale, out[t0])
                continue
            keys = k_blocks[blocks].reshape(-1, Hkv, D)[:L].transpose(1, 2, 0)       # [Hkv, D, L]
            values = v_blocks[blocks].reshape(-1, Hkv, D)[:L].transpose(1, 0, 2)     # [Hkv, L, D]
            # query head h uses KV head h // G: group the G heads of each KV head with the n tokens
            qg = q[t0:t1].reshape(n, Hkv, G, D).transpose(1, 2, 0, 3).reshape(Hkv, G * n, D)
            scores = (qg @ keys).reshape(Hkv, G, n, L) * np.float32(c.attn_scale)
            scores += masks[s]                                                      # [n, L] 0 / -inf
            top = scores.max(axis=-1, keepdims=True)
            if sinks is not None:
                sink = sinks.reshape(Hkv, G, 1, 1)
                top = np.maximum(top, sink)
            scores -= top
            np.exp(scores, out=scores)
            denominator = scores.sum(axis=-1, keepdims=True)
            if sinks is not None:
                denominator += np.exp(sink - top)
            scores /= denominator
            ctx = scores.reshape(Hkv, G * n, L) @ values                             # [Hkv, G n, D]
            out[t0:t1] = ctx.reshape(Hkv, G, n, D).transpose(2, 0, 1, 3).reshape(n, H * D)
        return out


def _compiled_norm(lk):
    """rms_norm's contract on engine.model.layer_kernels.rms_norm_rows (rows of the last axis)."""
    def norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
        rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
        out = np.empty(rows.shape, np.float32)
        lk.rms_norm_rows(rows, weight, eps, lk.pairwise_plan(rows.shape[1]), out)
        return out.reshape(x.shape)
    return norm


class _Masks:
    """Additive attention masks per sequence ([n, L]: 0 where allowed, -inf elsewhere), built once per step
    for full attention and once for sliding-window attention, and shared by all layers of that kind."""

    def __init__(self, step: StepInput, window: int):
        self.step = step
        self.window = window
        self._cache: dict[bool, list[np.ndarray]] = {}

    def get(self, sliding: bool) -> list[np.ndarray]:
        if sliding not in self._cache:
            self._cache[sliding] = [self._build(s, sliding) for s in range(self.step.num_seqs)]
        return self._cache[sliding]

    def _build(self, s: int, sliding: bool) -> np.ndarray:
        st = self.step
        q_pos = st.positions[st.query_start_loc[s]: st.query_start_loc[s + 1]][:, None]   # [n, 1]
        k_pos = np.arange(int(st.seq_lens[s]))[None, :]                                  # [1, L]
        allowed = k_pos <= q_pos
        if sliding:
            allowed &= k_pos > q_pos - self.window
        return np.where(allowed, np.float32(0.0), np.float32(-np.inf))
