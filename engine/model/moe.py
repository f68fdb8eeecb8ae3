"""Mixture-of-experts feed-forward on the CPU (qwen3moe, gpt-oss), numpy float32.

Per token t with normed input h_t [E]:
    logits = W_router h_t (+ b)                        [n_expert]
    ids    = the k largest logits                      (k = n_expert_used)
    w      = softmax(logits[ids])                      == softmax over all, keep top k, renormalise
    out_t  = sum_j w_j * down_{ids_j}(act(gate_{ids_j} h_t, up_{ids_j} h_t))
Qwen3-MoE's reference takes softmax over all experts, the top k of those, then divides by their sum
(norm_topk_prob); gpt-oss's takes the top k logits and a softmax over them. Both are the same numbers, so
one routing function serves both.

Expert weights stay as the file stores them (ExpertStack: a read-only view of the memory map, in the
file's quant type), so a 17 GB model never becomes 70 GB of float32. Each expert a step routes to runs
once for all of that step's tokens that chose it: through the compiled quantized kernels
(engine.model.quant_matrix: only that expert's rows are read), or, on the numpy path, dequantized to
float32 first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.gguf.dequant import dequantize
from engine.gguf.types import GGMLType
from engine.model.quant_matrix import QuantLinear, QuantMatrix, kernel_block

# gpt-oss's clamped SwiGLU (transformers GptOssExperts, llama.cpp swiglu_oai): fixed by the model, not in GGUF
OAI_ALPHA = np.float32(1.702)
OAI_LIMIT = np.float32(7.0)


@dataclass(frozen=True)
class ExpertStack:
    """n_expert matrices [rows, cols] stacked as in the file: `raw` [n_expert, bytes per expert] uint8, a
    read-only view of the model's memory map (no copy), decoded one expert at a time."""
    raw: np.ndarray
    ggml_type: GGMLType
    rows: int
    cols: int

    @property
    def n_expert(self) -> int:
        return self.raw.shape[0]

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes

    def expert(self, e: int) -> np.ndarray:
        """Expert `e` as float32 [rows, cols]."""
        return dequantize(self.raw[e], self.ggml_type, self.rows * self.cols).reshape(self.rows, self.cols)

    def project(self, e: int, x: np.ndarray) -> np.ndarray:
        """x [n, cols] @ expert(e).T -> [n, rows]: a quantized product over expert e's bytes when a kernel
        exists for the type, else through the float32 expert."""
        block = kernel_block(self.ggml_type)
        if block is None or self.cols % block:
            return x @ self.expert(e).T
        return QuantLinear((QuantMatrix(self.raw[e].reshape(self.rows, -1), self.ggml_type, self.rows,
                                        self.cols),))(x)


@dataclass(frozen=True)
class MoeWeights:
    router: np.ndarray                      # [n_expert, E] float32
    gate: ExpertStack                       # per expert [F, E]
    up: ExpertStack                         # per expert [F, E]
    down: ExpertStack                       # per expert [E, F]
    router_bias: np.ndarray | None = None   # [n_expert] (gpt-oss)
    gate_bias: np.ndarray | None = None     # [n_expert, F]
    up_bias: np.ndarray | None = None       # [n_expert, F]
    down_bias: np.ndarray | None = None     # [n_expert, E]

    @property
    def nbytes(self) -> int:
        small = (self.router, self.router_bias, self.gate_bias, self.up_bias, self.down_bias)
        return sum(a.nbytes for a in small if a is not None) + self.gate.nbytes + self.up.nbytes + self.down.nbytes


def route(logits: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """logits [T, n_expert] -> (ids [T, k] int64, best first; weights [T, k] float32 summing to 1)."""
    ids = np.argpartition(-logits, k - 1, axis=-1)[:, :k]
    top = np.take_along_axis(logits, ids, axis=-1)
    order = np.argsort(-top, axis=-1, kind="stable")
    ids, top = np.take_along_axis(ids, order, axis=-1), np.take_along_axis(top, order, axis=-1)
    w = np.exp(top - top[:, :1])
    return ids, (w / w.sum(axis=-1, keepdims=True)).astype(np.float32)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 0.5 + 0.5 * np.tanh(0.5 * x)                  # without exp overflow


def swiglu(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    return gate * _sigmoid(gate) * up


def swiglu_oai(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """gpt-oss: gate clamped above at 7, up clamped to [-7, 7]; gate * sigmoid(1.702 gate) * (up + 1)."""
    gate = np.minimum(gate, OAI_LIMIT)
    up = np.clip(up, -OAI_LIMIT, OAI_LIMIT)
    return gate * _sigmoid(gate * OAI_ALPHA) * (up + np.float32(1.0))


EXPERT_ACTIVATIONS = {"swiglu": swiglu, "swiglu_oai": swiglu_oai}


def _bias(b: np.ndarray | None, e: int):
    return 0.0 if b is None else b[e]


def moe_ffn(h: np.ndarray, mw: MoeWeights, k: int, activation: str) -> np.ndarray:
    """h [T, E] (after the pre-FFN norm) -> [T, E]. Each routed expert runs once per call."""
    act = EXPERT_ACTIVATIONS[activation]
    logits = h @ mw.router.T                                       # [T, n_expert]
    if mw.router_bias is not None:
        logits += mw.router_bias
    ids, weights = route(logits, k)
    out = np.zeros_like(h)
    for e in np.unique(ids).tolist():
        tokens, slot = np.nonzero(ids == e)                        # tokens that chose e, at rank `slot`
        x = h[tokens]                                              # [n, E]
        gate = mw.gate.project(e, x) + _bias(mw.gate_bias, e)      # [n, F]
        up = mw.up.project(e, x) + _bias(mw.up_bias, e)
        y = mw.down.project(e, act(gate, up)) + _bias(mw.down_bias, e)     # [n, E]
        out[tokens] += weights[tokens, slot][:, None] * y
    return out
