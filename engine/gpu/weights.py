"""Device weights: every matrix uploaded once, still quantized, in GGUF's own block layout.

A matrix [rows, K] of ggml type t is rows x (K / block_elems) blocks of block_bytes, row-major: exactly
the bytes in the file, so device memory is about the file size. The kernels (halo_quant.cu) decode
blocks on the fly. Vectors (norms, biases) are small and uploaded as float32.
q/k/v and gate/up stay separate tensors (their types may differ: gemma's v is Q8_0 next to Q5_0 q/k);
the kernels take up to three matrices per launch instead, so fusion costs no copy.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from engine.backends.base import Backend, DeviceBuffer, Stream
from engine.errors import InvalidModelError, UnsupportedModelError
from engine.gguf.types import BLOCK_LAYOUT, GGMLType
from engine.model.config import ModelConfig
from engine.model.weights import checked_tensor

# what halo_quant.cu decodes (dq8)
KERNEL_TYPES = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q4_0, GGMLType.Q4_1,
                          GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K,
                          GGMLType.Q6_K})


@dataclass(frozen=True)
class DeviceMatrix:
    buf: DeviceBuffer
    ggml_type: int
    rows: int
    cols: int          # K

    @property
    def row_bytes(self) -> int:
        elems, nbytes = BLOCK_LAYOUT[GGMLType(self.ggml_type)]
        return self.cols // elems * nbytes


@dataclass(frozen=True)
class DeviceLayer:
    attn_norm: DeviceBuffer
    wq: DeviceMatrix
    wk: DeviceMatrix
    wv: DeviceMatrix
    bqkv: DeviceBuffer | None
    q_norm: DeviceBuffer | None
    k_norm: DeviceBuffer | None
    wo: DeviceMatrix
    post_attn_norm: DeviceBuffer | None
    ffn_norm: DeviceBuffer
    w_gate: DeviceMatrix
    w_up: DeviceMatrix
    w_down: DeviceMatrix
    post_ffn_norm: DeviceBuffer | None


@dataclass
class DeviceWeights:
    token_embd: DeviceMatrix
    layers: list[DeviceLayer]
    output_norm: DeviceBuffer
    output: DeviceMatrix            # the same DeviceMatrix as token_embd when tied
    rope_inv_freq: DeviceBuffer     # [n_layers, rope_dim / 2] float64
    buffers: list[DeviceBuffer]     # everything allocated, for free()
    nbytes: int                     # bytes uploaded (matrices as in the file)
    matrix_bytes: int               # bytes of the matrices a decode step reads (embedding row aside)

    def free(self, backend: Backend) -> None:
        for b in self.buffers:
            if not b.freed:
                backend.free(b)
        self.buffers.clear()


class _Uploader:
    def __init__(self, backend: Backend, gguf, config: ModelConfig, stream: Stream, progress=None):
        self.backend, self.gguf, self.config, self.stream, self.progress = backend, gguf, config, stream, progress
        self.buffers: list[DeviceBuffer] = []
        self.nbytes = 0
        self.done = 0

    def _alloc_copy(self, host: np.ndarray, shape, dtype) -> DeviceBuffer:
        buf = self.backend.alloc(shape, dtype)
        self.buffers.append(buf)
        self.backend.copy_h2d_async(buf, host, self.stream)
        self.nbytes += host.nbytes
        self.done += 1
        if self.progress is not None:
            self.progress(self.done / len(self.gguf.tensors), "uploading weights")
        return buf

    def info(self, name: str, shape: tuple[int, ...]):
        return checked_tensor(self.gguf, name, shape)

    def matrix(self, name: str, rows: int, cols: int) -> DeviceMatrix:
        info = self.info(name, (rows, cols))
        if info.ggml_type not in KERNEL_TYPES:
            raise UnsupportedModelError(f"tensor {name} is {GGMLType(info.ggml_type).name}, which the GPU kernels "
                                        f"do not decode (they do: {', '.join(sorted(t.name for t in KERNEL_TYPES))})")
        if cols % 8:
            raise UnsupportedModelError(f"tensor {name}: row length {cols} is not a multiple of 8")
        raw = self.gguf.raw(name)
        buf = self._alloc_copy(raw, raw.shape, np.uint8)
        return DeviceMatrix(buf, int(info.ggml_type), rows, cols)

    def vector(self, name: str, n: int) -> DeviceBuffer:
        self.info(name, (n,))
        host = np.ascontiguousarray(self.gguf.dequantize(name), dtype=np.float32)
        if not np.isfinite(host).all():
            raise InvalidModelError(f"tensor {name} holds NaN or infinite values", field=name)
        return self._alloc_copy(host, (n,), np.float32)

    def optional_vector(self, name: str, n: int) -> DeviceBuffer | None:
        return self.vector(name, n) if name in self.gguf.tensors else None


def rope_tables(config: ModelConfig) -> np.ndarray:
    """[n_layers, rope_dim / 2] float64 inverse frequencies, as engine.model.cpu_forward.Rope computes them."""
    half = config.rope_dim // 2
    exps = -np.arange(half, dtype=np.float64) * 2.0 / config.rope_dim
    return np.stack([scale * theta ** exps for theta, scale in zip(config.rope_theta, config.rope_freq_scale,
                                                                    strict=True)])


def upload_weights(backend: Backend, gguf, config: ModelConfig, stream: Stream, progress=None) -> DeviceWeights:
    """Upload every tensor `config` needs; raises InvalidModelError / UnsupportedModelError naming the tensor.
    Returns once the copies are queued on `stream` (the caller synchronizes before the first step)."""
    c = config
    up = _Uploader(backend, gguf, c, stream, progress)
    try:
        embd = up.matrix("token_embd.weight", c.vocab_size, c.n_embd)
        layers = []
        for i in range(c.n_layers):
            p = f"blk.{i}."
            bias = None
            if p + "attn_q.bias" in gguf.tensors:
                host = np.concatenate([np.asarray(gguf.dequantize(p + n), np.float32)
                                       for n in ("attn_q.bias", "attn_k.bias", "attn_v.bias")])
                bias = up._alloc_copy(host, host.shape, np.float32)
            elif c.has_qkv_bias:
                raise InvalidModelError(f"{c.arch} needs q/k/v biases; tensor {p}attn_q.bias is missing",
                                        field=p + "attn_q.bias")
            layers.append(DeviceLayer(
                attn_norm=up.vector(p + "attn_norm.weight", c.n_embd),
                wq=up.matrix(p + "attn_q.weight", c.q_dim, c.n_embd),
                wk=up.matrix(p + "attn_k.weight", c.kv_dim, c.n_embd),
                wv=up.matrix(p + "attn_v.weight", c.kv_dim, c.n_embd),
                bqkv=bias,
                q_norm=up.vector(p + "attn_q_norm.weight", c.head_dim) if c.has_qk_norm else None,
                k_norm=up.vector(p + "attn_k_norm.weight", c.head_dim) if c.has_qk_norm else None,
                wo=up.matrix(p + "attn_output.weight", c.n_embd, c.q_dim),
                post_attn_norm=up.vector(p + "post_attention_norm.weight", c.n_embd) if c.has_post_norms else None,
                ffn_norm=up.vector(p + "ffn_norm.weight", c.n_embd),
                w_gate=up.matrix(p + "ffn_gate.weight", c.n_ff, c.n_embd),
                w_up=up.matrix(p + "ffn_up.weight", c.n_ff, c.n_embd),
                w_down=up.matrix(p + "ffn_down.weight", c.n_embd, c.n_ff),
                post_ffn_norm=up.vector(p + "post_ffw_norm.weight", c.n_embd) if c.has_post_norms else None,
            ))
        output_norm = up.vector("output_norm.weight", c.n_embd)
        output = up.matrix("output.weight", c.vocab_size, c.n_embd) if "output.weight" in gguf.tensors else embd
        inv = rope_tables(c)
        rope = up._alloc_copy(inv, inv.shape, np.float64)
    except BaseException:
        backend.synchronize()
        for b in up.buffers:
            backend.free(b)
        raise
    per_layer = [m for L in layers for m in (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down)]
    matrix_bytes = sum(m.rows * m.row_bytes for m in per_layer) + output.rows * output.row_bytes
    return DeviceWeights(embd, layers, output_norm, output, rope, up.buffers, up.nbytes, matrix_bytes)
