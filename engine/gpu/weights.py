"""Device weights: every matrix uploaded once, still quantized, in GGUF's own block layout.

A matrix [rows, K] of ggml type t is rows x (K / block_elems) blocks of block_bytes, row-major: exactly
the bytes in the file, so device memory is about the file size. The kernels (halo_quant.cu) decode
blocks on the fly. Vectors (norms, biases) are small and uploaded as float32.
q/k/v and gate/up stay separate tensors (their types may differ: gemma's v is Q8_0 next to Q5_0 q/k);
the kernels take up to three matrices per launch instead, so fusion costs no copy.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from engine.backends.base import Backend, DeviceBuffer, Stream
from engine.errors import InvalidModelError, UnsupportedModelError
from engine.gguf.types import BLOCK_LAYOUT, GGMLType
from engine.gpu.hybrid import CONV_MAX_K, RECURRENT_MAX_DK, DeviceLinearLayer
from engine.gpu.moe import DeviceExperts, DeviceMoe, decode_bytes, gpu_moe_refusal
from engine.model.arch import TensorSpec, global_tensor_specs, layer_tensor_specs, rope_inv_freq
from engine.model.config import ModelConfig
from engine.model.weights import checked_tensor, nonfinite_error, require_finite

# what halo_quant.cu decodes (dq8)
KERNEL_TYPES = frozenset({GGMLType.F32, GGMLType.F16, GGMLType.BF16, GGMLType.Q4_0, GGMLType.Q4_1,
                          GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.Q4_K, GGMLType.Q5_K,
                          GGMLType.Q6_K, GGMLType.MXFP4})


@dataclass(frozen=True, eq=False)     # a handle to device memory: equal only to itself (hashed as cheaply: launches
class DeviceMatrix:                   # look their matrices up, engine.gpu.forward.GpuForward.matrices)
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
    w_gate: DeviceMatrix | None          # None: a mixture-of-experts FFN (moe)
    w_up: DeviceMatrix | None
    w_down: DeviceMatrix | None
    post_ffn_norm: DeviceBuffer | None
    moe: DeviceMoe | None = None         # engine.gpu.moe
    bo: DeviceBuffer | None = None       # attn_output bias [n_embd] (gpt-oss)
    sinks: DeviceBuffer | None = None    # attention-sink logits [n_head] (gpt-oss)


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
        # progress in bytes of the file: a 17 GB MoE model's experts are a few huge tensors
        self.file_bytes = max(1, sum(t.nbytes for t in gguf.tensors.values()))
        # Each matrix's scale bytes are scanned for NaN/inf (require_finite: ~0.2 s for 2.3 GB of Q4_K on one
        # core) on a worker while the copies are queued: numpy's scan and the runtime's pageable copy both run
        # without the GIL. `finish` waits for them and raises the first refusal in upload order.
        self._scans = ThreadPoolExecutor(1, thread_name_prefix="halo-finite")
        self._scanned: list[Future] = []

    def _alloc_copy(self, host: np.ndarray, shape, dtype) -> DeviceBuffer:
        """Copies straight from the file's read-only map (pageable host memory: the runtime stages it through
        its own bounded pinned buffers), so no host copy of the model is ever made."""
        buf = self.backend.alloc(shape, dtype)
        self.buffers.append(buf)
        self.backend.copy_h2d_async(buf, host, self.stream)
        self.nbytes += host.nbytes
        if self.progress is not None:
            done = min(self.nbytes, self.file_bytes)
            self.progress(done / self.file_bytes, f"uploading weights: {done / 2**30:.2f} of "
                                                  f"{self.file_bytes / 2**30:.2f} GiB")
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
        self._require_finite(name)
        raw = self.gguf.raw(name)
        buf = self._alloc_copy(raw, raw.shape, np.uint8)
        return DeviceMatrix(buf, int(info.ggml_type), rows, cols)

    def _require_finite(self, name: str) -> None:
        self._scanned.append(self._scans.submit(require_finite, self.gguf, name))

    def finish(self) -> None:
        """Waits for the finite scans queued so far and raises the first refusal (InvalidModelError naming the
        tensor): after a later failure too, which a refused earlier tensor would have preceded."""
        try:
            for scan in self._scanned:
                scan.result()
        finally:
            self._scans.shutdown()

    def vector(self, name: str, n: int | tuple[int, ...]) -> DeviceBuffer:
        """A float32 tensor of shape `n` (a length, or a small 2-D shape: the conv weight [C, K], per-expert
        biases [n_expert, n])."""
        shape = (n,) if isinstance(n, int) else tuple(n)
        self.info(name, shape)
        host = np.ascontiguousarray(self.gguf.dequantize(name), dtype=np.float32).reshape(shape)
        if not np.isfinite(host).all():
            raise nonfinite_error(name)
        return self._alloc_copy(host, shape, np.float32)

    def optional_vector(self, name: str, n: int) -> DeviceBuffer | None:
        return self.vector(name, n) if name in self.gguf.tensors else None

    def experts(self, spec: TensorSpec) -> DeviceExperts:
        n, rows, cols = spec.shape
        info = self.info(spec.name, spec.shape)
        if info.ggml_type not in KERNEL_TYPES:
            raise UnsupportedModelError(f"tensor {spec.name} is {GGMLType(info.ggml_type).name}, which the GPU "
                                        f"kernels do not decode")
        self._require_finite(spec.name)
        raw = self.gguf.raw(spec.name)
        return DeviceExperts(self._alloc_copy(raw, raw.shape, np.uint8), int(info.ggml_type), n, rows, cols)

    def spec(self, spec: TensorSpec):
        """The DeviceMatrix / float32 DeviceBuffer `spec` names; None when optional and absent. The rope
        factors are folded into the rope table instead (rope_tables); q/k/v biases stay on the host here
        (float32 arrays) because the kernels take them as one concatenated buffer."""
        if spec.role == "rope_freqs" or (not spec.required and spec.name not in self.gguf.tensors):
            return None
        if spec.experts:
            return self.experts(spec)
        if spec.role in _BIAS_ROLES:
            self.info(spec.name, spec.shape)
            return np.asarray(self.gguf.dequantize(spec.name), np.float32)
        if spec.matrix:
            return self.matrix(spec.name, *spec.shape)
        return self.vector(spec.name, spec.shape)


_BIAS_ROLES = ("bq", "bk", "bv")


def _layer(up: _Uploader, t: dict) -> DeviceLayer | DeviceLinearLayer:
    """A layer from its tensors by role (engine.model.arch's specs, which already chose them by layer kind)."""
    if "wqkv" in t:
        return DeviceLinearLayer(**t)
    bias = None
    if any(t[r] is not None for r in _BIAS_ROLES):
        if any(t[r] is None for r in _BIAS_ROLES):
            raise InvalidModelError("a layer carries some but not all of the q/k/v biases", field="attn_q.bias")
        host = np.concatenate([t[r] for r in _BIAS_ROLES])            # [q_dim + 2 kv_dim]
        if not np.isfinite(host).all():
            raise InvalidModelError("a q/k/v bias holds NaN or infinite values", field="attn_q.bias")
        bias = up._alloc_copy(host, host.shape, np.float32)
    moe = None
    if "router" in t:
        moe = DeviceMoe(t["router"], t["exp_gate"], t["exp_up"], t["exp_down"], router_bias=t.get("router_bias"),
                        gate_bias=t.get("exp_gate_bias"), up_bias=t.get("exp_up_bias"),
                        down_bias=t.get("exp_down_bias"))
    return DeviceLayer(attn_norm=t["attn_norm"], wq=t["wq"], wk=t["wk"], wv=t["wv"], bqkv=bias,
                       q_norm=t.get("q_norm"), k_norm=t.get("k_norm"), wo=t["wo"],
                       post_attn_norm=t.get("post_attn_norm"), ffn_norm=t["ffn_norm"], w_gate=t.get("w_gate"),
                       w_up=t.get("w_up"), w_down=t.get("w_down"), post_ffn_norm=t.get("post_ffn_norm"), moe=moe,
                       bo=t.get("bo"), sinks=t.get("sinks"))


def rope_tables(config: ModelConfig, freq_factors: np.ndarray | None = None) -> np.ndarray:
    """[n_layers, rope_dim / 2] float64 inverse frequencies: engine.model.arch.rope_inv_freq, the CPU's too."""
    return rope_inv_freq(config, freq_factors)


# halo_add_norm holds a token's row in one block's registers: AN_PER elements per thread, <= 1024 threads
ADD_NORM_PER_THREAD, ADD_NORM_MAX_THREADS = 16, 1024


def gpu_refusal(c: ModelConfig) -> str | None:
    """Why the GPU path cannot run this model (None: it can). Asked by the uploader and by `inspect`."""
    if c.n_embd > ADD_NORM_PER_THREAD * ADD_NORM_MAX_THREADS:
        return (f"{c.arch}: hidden size {c.n_embd} is wider than the GPU's residual + norm kernel takes "
                f"({ADD_NORM_PER_THREAD * ADD_NORM_MAX_THREADS}); it runs on the CPU")
    if c.has_recurrent_state and (c.ssm_conv_kernel > CONV_MAX_K or c.ssm_k_dim > RECURRENT_MAX_DK):
        return (f"{c.arch}: the GPU's Gated DeltaNet kernels take conv kernels <= {CONV_MAX_K} and key heads "
                f"<= {RECURRENT_MAX_DK} wide (this model: {c.ssm_conv_kernel}, {c.ssm_k_dim}); it runs on the CPU")
    return gpu_moe_refusal(c)


def gpu_unsupported_reason(config: ModelConfig, tensors=()) -> str | None:
    """`gpu_refusal`, or a matrix type among `tensors` (GGUF TensorInfos) that the kernels do not decode.
    Asked from a header alone (engine.hub's fit verdict), before any download."""
    if (refusal := gpu_refusal(config)) is not None:
        return refusal
    for t in tensors:
        if len(t.shape) == 2 and t.ggml_type not in KERNEL_TYPES:
            return (f"tensor {t.name} is {GGMLType(t.ggml_type).name}, which the GPU kernels do not decode "
                    f"(they do: {', '.join(sorted(k.name for k in KERNEL_TYPES))}); this model runs on the CPU")
    return None


def layer_matrices(layers) -> list[DeviceMatrix]:
    """Every matrix of the layers, layer by layer (a mixture-of-experts layer's experts aside: DeviceMoe's)."""
    return [m for L in layers for m in (L.matrices if isinstance(L, DeviceLinearLayer) else
                                        (L.wq, L.wk, L.wv, L.wo, L.w_gate, L.w_up, L.w_down)) if m is not None]


def upload_weights(backend: Backend, gguf, config: ModelConfig, stream: Stream, progress=None) -> DeviceWeights:
    """Upload every tensor `config` needs; raises InvalidModelError / UnsupportedModelError naming the tensor.
    Returns once the copies are queued on `stream` (the caller synchronizes before the first step)."""
    c = config
    refusal = gpu_refusal(c)
    if refusal:
        raise UnsupportedModelError(refusal)
    up = _Uploader(backend, gguf, c, stream, progress)
    try:
        g = {spec.role: up.spec(spec) for spec in global_tensor_specs(c)}
        embd = g["token_embd"]
        layers = [_layer(up, {spec.role: up.spec(spec) for spec in layer_tensor_specs(c, i)})
                  for i in range(c.n_layers)]
        output_norm = g["output_norm"]
        output = embd if g["output"] is None else g["output"]
        factors = None
        if "rope_freqs.weight" in gguf.tensors:       # the same factors the CPU loader checks and divides by
            up.info("rope_freqs.weight", (c.rope_dim // 2,))
            factors = np.asarray(gguf.dequantize("rope_freqs.weight"), np.float64)
            if not (np.isfinite(factors).all() and (factors > 0).all()):
                raise InvalidModelError("rope_freqs.weight holds non-positive frequency factors",
                                        field="rope_freqs.weight")
        inv = rope_tables(c, factors)
        rope = up._alloc_copy(inv, inv.shape, np.float64)
        up.finish()
    except BaseException:
        try:
            up.finish()
        finally:
            backend.synchronize()
            for b in up.buffers:
                backend.free(b)
        raise
    matrix_bytes = sum(m.rows * m.row_bytes for m in layer_matrices(layers)) + output.rows * output.row_bytes
    matrix_bytes += sum(decode_bytes(L.moe, c.n_expert_used) for L in layers if L.moe is not None)
    return DeviceWeights(embd, layers, output_norm, output, rope, up.buffers, up.nbytes, matrix_bytes)
