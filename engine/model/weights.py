"""Weights: the model's parameters as read-only float32 arrays, laid out once for fast CPU matmuls.

Layout (all C-contiguous float32, never written after load):
- matrices stay in GGUF's [out, in] row order, so a projection is `x @ W.T` with x [T, in]: numpy hands
  that to BLAS sgemm/sgemv with a transpose flag and streams W's rows once, which is what decode is
  bound by (memory bandwidth);
- q, k and v are fused into one [q_dim + 2*kv_dim, n_embd] matrix, gate and up into one [2*n_ff, n_embd]
  matrix: one BLAS call instead of three (two), and x is read once;
- a tied output head is the same array as the token embedding (no copy).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.errors import InvalidModelError
from engine.model.config import ModelConfig

LoadCallback = Callable[[float, str], None]   # (fraction 0..1, message); may raise to cancel


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: np.ndarray            # [n_embd]
    wqkv: np.ndarray                 # [q_dim + 2*kv_dim, n_embd]
    bqkv: np.ndarray | None          # [q_dim + 2*kv_dim] (qwen2)
    q_norm: np.ndarray | None        # [head_dim] (gemma3, qwen3)
    k_norm: np.ndarray | None        # [head_dim]
    wo: np.ndarray                   # [n_embd, q_dim]
    post_attn_norm: np.ndarray | None   # [n_embd] (gemma3)
    ffn_norm: np.ndarray             # [n_embd]
    w_gate_up: np.ndarray            # [2*n_ff, n_embd]: rows 0..n_ff are the gate
    w_down: np.ndarray               # [n_embd, n_ff]
    post_ffn_norm: np.ndarray | None    # [n_embd] (gemma3)


@dataclass(frozen=True)
class Weights:
    token_embd: np.ndarray           # [vocab, n_embd]
    layers: tuple[LayerWeights, ...]
    output_norm: np.ndarray          # [n_embd]
    output: np.ndarray               # [vocab, n_embd]; `is token_embd` when tied
    rope_freqs: np.ndarray | None = None   # [rope_dim/2] frequency divisors (Llama 3.1+), else None

    @property
    def nbytes(self) -> int:
        arrays = [self.token_embd, self.output_norm] + ([self.rope_freqs] if self.rope_freqs is not None else [])
        if self.output is not self.token_embd:
            arrays.append(self.output)
        for layer in self.layers:
            arrays.extend(a for a in vars(layer).values() if a is not None)
        return sum(a.nbytes for a in arrays)


def checked_tensor(gguf, name: str, shape: tuple[int, ...]):
    """The TensorInfo of `name`, which must exist with exactly `shape` (numpy order) as the config implies.
    Shared by the CPU and GPU weight loaders: a file whose tensors contradict its hyperparameters is invalid."""
    info = gguf.tensors.get(name)
    if info is None:
        raise InvalidModelError(f"tensor {name} is missing", field=name)
    if tuple(info.shape) != shape:
        raise InvalidModelError(f"tensor {name} has shape {tuple(info.shape)}, the hyperparameters say {shape}",
                                field=name)
    return info


def _readonly(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=np.float32)
    a.flags.writeable = False
    return a


class _Loader:
    def __init__(self, gguf, config: ModelConfig, progress: LoadCallback | None):
        self.gguf = gguf
        self.config = config
        self.progress = progress
        self.done = 0
        self.total = len(gguf.tensors)

    def has(self, name: str) -> bool:
        return name in self.gguf.tensors

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        checked_tensor(self.gguf, name, shape)
        array = np.asarray(self.gguf.dequantize(name), dtype=np.float32).reshape(shape)
        if not array.flags.writeable:      # a view into the file's map (F32 tensors): own a copy
            array = array.copy()
        if not np.isfinite(array).all():
            raise InvalidModelError(f"tensor {name} holds NaN or infinite values", field=name)
        self.done += 1
        if self.progress is not None:
            self.progress(self.done / self.total, f"loading {name}")
        return array

    def optional(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        return self.get(name, shape) if self.has(name) else None


def load_weights(gguf, config: ModelConfig, progress: LoadCallback | None = None) -> Weights:
    """Dequantize every tensor of `gguf` (an engine.gguf.GGUFFile) to float32 and check each shape against
    `config`. Raises InvalidModelError naming the tensor on a missing tensor or a shape mismatch."""
    c = config
    ld = _Loader(gguf, c, progress)
    token_embd = _readonly(ld.get("token_embd.weight", (c.vocab_size, c.n_embd)))
    layers = []
    for i in range(c.n_layers):
        p = f"blk.{i}."
        q = ld.get(p + "attn_q.weight", (c.q_dim, c.n_embd))
        k = ld.get(p + "attn_k.weight", (c.kv_dim, c.n_embd))
        v = ld.get(p + "attn_v.weight", (c.kv_dim, c.n_embd))
        bias = None
        if ld.has(p + "attn_q.bias"):
            bias = np.concatenate([ld.get(p + "attn_q.bias", (c.q_dim,)), ld.get(p + "attn_k.bias", (c.kv_dim,)),
                                   ld.get(p + "attn_v.bias", (c.kv_dim,))])
        elif c.has_qkv_bias:
            raise InvalidModelError(f"{c.arch} needs q/k/v biases; tensor {p}attn_q.bias is missing",
                                    field=p + "attn_q.bias")
        gate = ld.get(p + "ffn_gate.weight", (c.n_ff, c.n_embd))
        up = ld.get(p + "ffn_up.weight", (c.n_ff, c.n_embd))
        qk_norm = c.has_qk_norm
        layers.append(LayerWeights(
            attn_norm=_readonly(ld.get(p + "attn_norm.weight", (c.n_embd,))),
            wqkv=_readonly(np.concatenate([q, k, v], axis=0)),
            bqkv=None if bias is None else _readonly(bias),
            q_norm=_readonly(ld.get(p + "attn_q_norm.weight", (c.head_dim,))) if qk_norm else None,
            k_norm=_readonly(ld.get(p + "attn_k_norm.weight", (c.head_dim,))) if qk_norm else None,
            wo=_readonly(ld.get(p + "attn_output.weight", (c.n_embd, c.q_dim))),
            post_attn_norm=_readonly(ld.get(p + "post_attention_norm.weight", (c.n_embd,)))
            if c.has_post_norms else None,
            ffn_norm=_readonly(ld.get(p + "ffn_norm.weight", (c.n_embd,))),
            w_gate_up=_readonly(np.concatenate([gate, up], axis=0)),
            w_down=_readonly(ld.get(p + "ffn_down.weight", (c.n_embd, c.n_ff))),
            post_ffn_norm=_readonly(ld.get(p + "post_ffw_norm.weight", (c.n_embd,))) if c.has_post_norms else None,
        ))
    output_norm = _readonly(ld.get("output_norm.weight", (c.n_embd,)))
    output = (_readonly(ld.get("output.weight", (c.vocab_size, c.n_embd))) if ld.has("output.weight")
              else token_embd)
    rope_freqs = ld.optional("rope_freqs.weight", (c.rope_dim // 2,))
    if rope_freqs is not None and (rope_freqs <= 0).any():
        raise InvalidModelError("rope_freqs.weight holds non-positive frequency factors", field="rope_freqs.weight")
    return Weights(token_embd=token_embd, layers=tuple(layers), output_norm=output_norm, output=output,
                   rope_freqs=None if rope_freqs is None else _readonly(rope_freqs))
