"""Weights: the model's parameters, laid out once for fast CPU products.

Projection matrices (TensorSpec.matrix) stay in the file's quant type when compiled kernels exist for it
(engine.model.quant_matrix: QuantMatrix views of the memory map, fused as QuantLinear); everything else,
and every matrix on the numpy path (engine.model.quant_matrix.kernel_path() == "numpy", the reference),
is read-only float32.

Float32 layout (all C-contiguous float32, never written after load):
- matrices stay in GGUF's [out, in] row order, so a projection is `x @ W.T` with x [T, in]: numpy hands
  that to BLAS sgemm/sgemv with a transpose flag and streams W's rows once, which is what decode is
  bound by (memory bandwidth);
- q, k and v are fused into one [q_dim + 2*kv_dim, n_embd] matrix, gate and up into one [2*n_ff, n_embd]
  matrix: one BLAS call instead of three (two), and x is read once;
- a tied output head is the same array as the token embedding (no copy);
- stacked experts (mixture-of-experts FFNs) are not dequantized: they stay views of the file's memory map in
  its quant type (engine.model.moe.ExpertStack), decoded an expert at a time by the forward pass.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.errors import InvalidModelError, UnsupportedModelError
from engine.gguf.dequant import DECODERS, decodes_finite
from engine.model.arch import TensorSpec, cpu_keeps_quantized, global_tensor_specs, layer_tensor_specs
from engine.model.config import ModelConfig
from engine.model.moe import ExpertStack, MoeWeights
from engine.model.quant_matrix import (
    QuantLinear,
    QuantMatrix,
    fuse,
    kernel_blocks,
    kernel_path,
    prepare_kernels,
)

Linear = np.ndarray | QuantLinear     # a projection: float32 [out, in] or quantized parts

LoadCallback = Callable[[float, str], None]   # (fraction 0..1, message); may raise to cancel


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: np.ndarray            # [n_embd]
    wqkv: Linear                     # [q_dim + 2*kv_dim, n_embd]
    bqkv: np.ndarray | None          # [q_dim + 2*kv_dim] (qwen2)
    q_norm: np.ndarray | None        # [head_dim] (gemma3, qwen3)
    k_norm: np.ndarray | None        # [head_dim]
    wo: Linear                       # [n_embd, q_dim]
    post_attn_norm: np.ndarray | None   # [n_embd] (gemma3)
    ffn_norm: np.ndarray             # [n_embd]
    w_gate_up: Linear | None         # [2*n_ff, n_embd]: rows 0..n_ff are the gate (None: a MoE FFN)
    w_down: Linear | None            # [n_embd, n_ff]
    post_ffn_norm: np.ndarray | None    # [n_embd] (gemma3)
    moe: MoeWeights | None = None    # the mixture-of-experts FFN instead of w_gate_up / w_down
    bo: np.ndarray | None = None     # [n_embd] attn_output bias (gpt-oss)
    sinks: np.ndarray | None = None  # [n_head] attention-sink logits (gpt-oss)


@dataclass(frozen=True)
class LinearLayerWeights:
    """A Gated DeltaNet layer (qwen35). C = 2 Hk Dk + Hv Dv conv channels (q | k | v)."""
    attn_norm: np.ndarray            # [n_embd]
    w_in: Linear                     # [C + Hv Dv + 2 Hv, n_embd]: qkv | z | beta | alpha rows, one matmul
    conv: np.ndarray                 # [C, kernel]
    dt_bias: np.ndarray              # [Hv]
    ssm_a: np.ndarray                # [Hv] = -exp(A_log)
    ssm_norm: np.ndarray             # [Dv]
    wo: Linear                       # [n_embd, Hv Dv]
    ffn_norm: np.ndarray             # [n_embd]
    w_gate_up: Linear                # [2*n_ff, n_embd]
    w_down: Linear                   # [n_embd, n_ff]


@dataclass(frozen=True)
class Weights:
    token_embd: Linear               # [vocab, n_embd]
    layers: tuple[LayerWeights | LinearLayerWeights, ...]
    output_norm: np.ndarray          # [n_embd]
    output: Linear                   # [vocab, n_embd]; `is token_embd` when tied
    rope_freqs: np.ndarray | None = None   # [rope_dim/2] frequency divisors (Llama 3.1+), else None

    @property
    def nbytes(self) -> int:
        arrays = [self.token_embd, self.output_norm] + ([self.rope_freqs] if self.rope_freqs is not None else [])
        if self.output is not self.token_embd:
            arrays.append(self.output)
        for layer in self.layers:
            arrays.extend(a for a in vars(layer).values() if a is not None)
        return sum(a.nbytes for a in arrays)     # MoeWeights.nbytes counts its experts' file bytes


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


def nonfinite_error(name: str) -> InvalidModelError:
    return InvalidModelError(f"tensor {name} holds NaN or infinite values", field=name)


def require_finite(gguf, name: str) -> None:
    """For a tensor kept as the file stores it (the CPU's quantized matrices, every GPU matrix): refuse NaN/inf
    at load, from its scale bytes (engine.gguf.dequant.decodes_finite), as a decoded tensor is refused."""
    if decodes_finite(gguf.raw(name), gguf.tensors[name].ggml_type) is False:
        raise nonfinite_error(name)


def _readonly(a):
    if isinstance(a, QuantLinear):
        return a
    a = np.ascontiguousarray(a, dtype=np.float32)
    a.flags.writeable = False
    return a


class _Loader:
    def __init__(self, gguf, config: ModelConfig, progress: LoadCallback | None):
        self.gguf = gguf
        self.config = config
        self.progress = progress
        kernel_path()                          # the kernels' first use (import, smoke test) happens here,
        self.kernel_blocks = kernel_blocks()   # on the loading thread; a failure leaves this empty
        # this model's kernels compiled (or read from the cache) before its weights are touched, then the
        # compiler's pages given back: the compiler and the weights are never resident at once
        if hasattr(gguf, "raw"):                # a file (not a dict of float32 arrays): matrices may stay quantized
            prepare_kernels({t.ggml_type for t in gguf.tensors.values()
                             if cpu_keeps_quantized(t, self.kernel_blocks)})
        self.done = 0                          # bytes of the file read so far: progress is in bytes, since a
        self.total = max(1, sum(t.nbytes for t in gguf.tensors.values()))   # MoE's experts are a few huge tensors

    def has(self, name: str) -> bool:
        return name in self.gguf.tensors

    def get(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        checked_tensor(self.gguf, name, shape)
        array = np.asarray(self.gguf.dequantize(name), dtype=np.float32).reshape(shape)
        if not array.flags.writeable:      # a view into the file's map (F32 tensors): own a copy
            array = array.copy()
        if not np.isfinite(array).all():
            raise nonfinite_error(name)
        self._advance(name, "loading")
        return array

    def _advance(self, name: str, verb: str) -> None:
        self.done += self.gguf.tensors[name].nbytes
        if self.progress is not None:
            self.progress(min(1.0, self.done / self.total), f"{verb} {name} ({self.done / 2**30:.2f} of "
                                                            f"{self.total / 2**30:.2f} GiB)")

    def matrix(self, name: str, shape: tuple[int, ...]) -> np.ndarray | QuantMatrix:
        """A projection matrix: kept as the file stores it (a QuantMatrix over the map) when a kernel exists
        for its type, else float32."""
        info = checked_tensor(self.gguf, name, shape)
        if not hasattr(self.gguf, "raw") or not cpu_keeps_quantized(info, self.kernel_blocks):
            return self.get(name, shape)
        require_finite(self.gguf, name)
        self._advance(name, "mapping")
        return QuantMatrix(self.gguf.raw(name).reshape(shape[0], -1), info.ggml_type, *shape)

    def optional(self, name: str, shape: tuple[int, ...]) -> np.ndarray | None:
        return self.get(name, shape) if self.has(name) else None

    def experts(self, spec: TensorSpec) -> ExpertStack:
        """Stacked experts kept in the file's type: a read-only view of the map, [n_expert, bytes each]."""
        info = checked_tensor(self.gguf, spec.name, spec.shape)
        n, rows, cols = spec.shape
        if info.ggml_type not in DECODERS:           # refused at load, not at the first token that uses it
            raise UnsupportedModelError(f"tensor {spec.name} is {info.ggml_type.name}, which this engine cannot "
                                        f"decode")
        require_finite(self.gguf, spec.name)
        self._advance(spec.name, "mapping")
        return ExpertStack(self.gguf.raw(spec.name).reshape(n, -1), info.ggml_type, rows, cols)

    def spec(self, spec: TensorSpec) -> np.ndarray | ExpertStack | None:
        """The tensor `spec` names (float32; stacked experts as they are in the file), or None when it is
        optional and absent."""
        if spec.experts:
            return self.experts(spec)
        if not spec.required and not self.has(spec.name):
            return None
        if spec.matrix:
            return self.matrix(spec.name, spec.shape)
        return self.get(spec.name, spec.shape)


def load_weights(gguf, config: ModelConfig, progress: LoadCallback | None = None) -> Weights:
    """Map or dequantize every tensor of `gguf` (an engine.gguf.GGUFFile) and check each shape against
    `config`. Tensors come from engine.model.arch's specs. Raises InvalidModelError naming the tensor on a
    missing tensor or a shape mismatch. Quantized matrices are views of the file's map: they keep it open."""
    ld = _Loader(gguf, config, progress)
    g = {s.role: ld.spec(s) for s in global_tensor_specs(config)}
    layers = tuple(_LAYER_BUILDERS[config.layer_kinds[i]](config, {s.role: ld.spec(s)
                                                                   for s in layer_tensor_specs(config, i)})
                   for i in range(config.n_layers))
    token_embd = _readonly(fuse([g["token_embd"]]))
    rope_freqs = g["rope_freqs"]
    if rope_freqs is not None and (rope_freqs <= 0).any():
        raise InvalidModelError("rope_freqs.weight holds non-positive frequency factors", field="rope_freqs.weight")
    return Weights(token_embd=token_embd, layers=layers, output_norm=_readonly(g["output_norm"]),
                   output=token_embd if g["output"] is None else _readonly(fuse([g["output"]])),
                   rope_freqs=None if rope_freqs is None else _readonly(rope_freqs))


def _maybe(a: np.ndarray | None) -> np.ndarray | None:
    return None if a is None else _readonly(a)


def _layer(c: ModelConfig, t: dict[str, np.ndarray | None]) -> LayerWeights:
    """An attention layer from its tensors by role (engine.model.arch._attention_specs/_ffn_specs)."""
    bias = None
    if t["bq"] is not None or t["bk"] is not None or t["bv"] is not None:
        if t["bq"] is None or t["bk"] is None or t["bv"] is None:
            raise InvalidModelError("a layer carries some but not all of the q/k/v biases", field="attn_q.bias")
        bias = np.concatenate([t["bq"], t["bk"], t["bv"]])
    dense = "w_gate" in t
    return LayerWeights(
        attn_norm=_readonly(t["attn_norm"]),
        wqkv=_readonly(fuse([t["wq"], t["wk"], t["wv"]])),
        bqkv=_maybe(bias),
        q_norm=_maybe(t.get("q_norm")),
        k_norm=_maybe(t.get("k_norm")),
        wo=_readonly(fuse([t["wo"]])),
        post_attn_norm=_maybe(t.get("post_attn_norm")),
        ffn_norm=_readonly(t["ffn_norm"]),
        w_gate_up=_readonly(fuse([t["w_gate"], t["w_up"]])) if dense else None,
        w_down=_readonly(fuse([t["w_down"]])) if dense else None,
        post_ffn_norm=_maybe(t.get("post_ffn_norm")),
        moe=None if dense else _moe(t),
        bo=_maybe(t.get("bo")),
        sinks=_maybe(t.get("sinks")),
    )


def _moe(t: dict) -> MoeWeights:
    """The mixture-of-experts FFN from its tensors by role (engine.model.arch._moe_ffn_specs)."""
    return MoeWeights(router=_readonly(t["router"]), gate=t["exp_gate"], up=t["exp_up"], down=t["exp_down"],
                      router_bias=_maybe(t.get("router_bias")), gate_bias=_maybe(t.get("exp_gate_bias")),
                      up_bias=_maybe(t.get("exp_up_bias")), down_bias=_maybe(t.get("exp_down_bias")))


def _linear_layer(c: ModelConfig, t: dict[str, np.ndarray]) -> LinearLayerWeights:
    """A Gated DeltaNet layer from its tensors by role (engine.model.arch._linear_attention_specs)."""
    return LinearLayerWeights(
        attn_norm=_readonly(t["attn_norm"]),
        w_in=_readonly(fuse([t["wqkv"], t["wz"], t["w_beta"], t["w_alpha"]])),
        conv=_readonly(t["conv"]), dt_bias=_readonly(t["dt_bias"]), ssm_a=_readonly(t["ssm_a"]),
        ssm_norm=_readonly(t["ssm_norm"]), wo=_readonly(fuse([t["wo"]])), ffn_norm=_readonly(t["ffn_norm"]),
        w_gate_up=_readonly(fuse([t["w_gate"], t["w_up"]])), w_down=_readonly(fuse([t["w_down"]])))


_LAYER_BUILDERS = {"attention": _layer, "linear_attention": _linear_layer}
