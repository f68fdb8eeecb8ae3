"""The one model schema: per-architecture traits, per-layer-kind tensor specs, rope frequencies, memory.

Everything that the CPU loader/forward, the GPU uploader/forward, the memory pre-flight, the KV manager and
the app's library estimate must agree on is written here once and asked for:
- `ARCHITECTURES`: what differs between architectures, as data (the forward passes never test `arch`);
- `layer_tensor_specs(config, layer)`: the GGUF tensors of a layer, by its mixer kind and its FFN kind
  (dense or mixture-of-experts), with the shapes the hyperparameters imply (both loaders iterate these);
- `rope_inv_freq(config, freq_factors)`: the rotary inverse frequencies of every layer (both paths);
- `kv_bytes_per_token`, `recurrent_state_bytes`, `weight_bytes`, `memory_estimate`: the memory formulas;
- `BLOCK_SIZE`: the paged KV cache's block size.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:
    from engine.model.config import ModelConfig

BLOCK_SIZE = 16          # tokens per paged-KV block, everywhere (scheduler, caches, benches, diagnostics)

RopeStyle = Literal["normal", "neox"]   # normal: rotate adjacent pairs (2i, 2i+1); neox: halves (i, i+d/2)
Activation = Literal["silu", "gelu_tanh"]
LayerKind = Literal["attention", "linear_attention"]   # softmax attention over the paged KV cache | recurrent
FfnKind = Literal["dense", "moe"]      # one SwiGLU MLP | a router choosing k of n expert MLPs per token
ExpertActivation = Literal["swiglu", "swiglu_oai"]   # silu(gate) * up | gpt-oss's clamped variant (see moe.py)
Backend = Literal["cpu", "gpu"]


@dataclass(frozen=True)
class ArchTraits:
    rope_style: RopeStyle
    activation: Activation              # applied to the gate projection; out = act(gate) * up
    qkv_bias: bool = False              # q/k/v projections carry biases (qwen2)
    qk_norm: bool = False               # per-head RMSNorm of q and k before rope
    post_norms: bool = False            # RMSNorm on the attention and FFN outputs before the residual (gemma3)
    embed_scale_sqrt: bool = False      # token embedding times sqrt(n_embd) (gemma)
    global_every: int = 0               # with a sliding window: every n-th layer is global (gemma3: 6, gpt-oss: 2)
    sliding_rope_base: float = 0.0      # sliding layers' own rope base, unscaled (gemma3: 10000); 0: as global
    output_gate: bool = False           # attn_q holds [q_h, gate_h] per head; out = attn * sigmoid(gate) (qwen35)
    hybrid: bool = False                # Gated-DeltaNet linear-attention layers, full attention every n-th (qwen35)
    ffn_norm_name: str = "ffn_norm"     # the pre-FFN norm's GGUF name (qwen35: post_attention_norm)
    moe: bool = False                   # every layer's FFN is a mixture of experts (`expert_count` experts)
    expert_activation: ExpertActivation = "swiglu"
    moe_biases: bool = False            # router and expert projections carry biases (gpt-oss)
    attn_out_bias: bool = False         # attn_output carries a bias (gpt-oss)
    attn_sinks: bool = False            # a learned per-head logit joins every softmax and takes no value (gpt-oss)
    yarn_truncate: bool = True          # YaRN's correction range rounded out to whole dims (gpt-oss: False)


ARCHITECTURES: dict[str, ArchTraits] = {
    "llama": ArchTraits(rope_style="normal", activation="silu"),
    "gemma3": ArchTraits(rope_style="neox", activation="gelu_tanh", qk_norm=True, post_norms=True,
                         embed_scale_sqrt=True, global_every=6, sliding_rope_base=10000.0),
    "qwen2": ArchTraits(rope_style="neox", activation="silu", qkv_bias=True),
    "qwen3": ArchTraits(rope_style="neox", activation="silu", qk_norm=True),
    # Qwen3.5 (llama.cpp's converter: every RMSNorm weight but ssm_norm stored as 1 + w, A_log as -exp(A_log),
    # V heads reordered from grouped-by-K to tiled order; partial neox rope on rope.dimension_count dims)
    "qwen35": ArchTraits(rope_style="neox", activation="silu", qk_norm=True, output_gate=True, hybrid=True,
                         ffn_norm_name="post_attention_norm"),
    # Qwen3-30B-A3B: qwen3 attention, every FFN sparse: softmax router, top-k, weights renormalised
    "qwen3moe": ArchTraits(rope_style="neox", activation="silu", qk_norm=True, moe=True),
    # gpt-oss-20b/120b: biased q/k/v/o, attention sinks, sliding window (128) on even layers, YaRN rope
    # (not truncated, as its reference config says), top-4 experts with biases and the clamped SwiGLU
    "gpt-oss": ArchTraits(rope_style="neox", activation="silu", qkv_bias=True, global_every=2,
                          ffn_norm_name="post_attention_norm", moe=True, expert_activation="swiglu_oai",
                          moe_biases=True, attn_out_bias=True, attn_sinks=True, yarn_truncate=False),
}


@dataclass(frozen=True)
class TensorSpec:
    role: str                     # the weight's name in the engine (a field of the layer's weights)
    name: str                     # full GGUF tensor name
    shape: tuple[int, ...]        # numpy order: [rows, cols] for matrices (GGUF ne reversed)
    matrix: bool                  # a projection (kept quantized on the GPU) rather than a vector
    required: bool = True         # False: loaded when present, None when absent
    experts: bool = False         # [n_expert, rows, cols] stacked experts: the CPU keeps these in the file's
                                  # type and dequantizes only the experts a step routes to

    @property
    def vector(self) -> bool:
        return not self.matrix


def _attention_specs(c: ModelConfig, p: str) -> list[TensorSpec]:
    t = ARCHITECTURES[c.arch]
    q_rows = 2 * c.q_dim if t.output_gate else c.q_dim       # output gate: [q_h, gate_h] interleaved per head
    specs = [TensorSpec("attn_norm", p + "attn_norm.weight", (c.n_embd,), False),
             TensorSpec("wq", p + "attn_q.weight", (q_rows, c.n_embd), True),
             TensorSpec("wk", p + "attn_k.weight", (c.kv_dim, c.n_embd), True),
             TensorSpec("wv", p + "attn_v.weight", (c.kv_dim, c.n_embd), True),
             # biases: required where the architecture has them, used where a file carries them anyway
             TensorSpec("bq", p + "attn_q.bias", (c.q_dim,), False, required=t.qkv_bias),
             TensorSpec("bk", p + "attn_k.bias", (c.kv_dim,), False, required=t.qkv_bias),
             TensorSpec("bv", p + "attn_v.bias", (c.kv_dim,), False, required=t.qkv_bias)]
    if t.qk_norm:
        specs += [TensorSpec("q_norm", p + "attn_q_norm.weight", (c.head_dim,), False),
                  TensorSpec("k_norm", p + "attn_k_norm.weight", (c.head_dim,), False)]
    specs.append(TensorSpec("wo", p + "attn_output.weight", (c.n_embd, c.q_dim), True))
    if t.attn_out_bias:
        specs.append(TensorSpec("bo", p + "attn_output.bias", (c.n_embd,), False))
    if t.attn_sinks:
        specs.append(TensorSpec("sinks", p + "attn_sinks.weight", (c.n_head,), False))
    if t.post_norms:
        specs.append(TensorSpec("post_attn_norm", p + "post_attention_norm.weight", (c.n_embd,), False))
    return specs


def _ffn_specs(c: ModelConfig, p: str) -> list[TensorSpec]:
    t = ARCHITECTURES[c.arch]
    specs = [TensorSpec("ffn_norm", p + t.ffn_norm_name + ".weight", (c.n_embd,), False),
             TensorSpec("w_gate", p + "ffn_gate.weight", (c.n_ff, c.n_embd), True),
             TensorSpec("w_up", p + "ffn_up.weight", (c.n_ff, c.n_embd), True),
             TensorSpec("w_down", p + "ffn_down.weight", (c.n_embd, c.n_ff), True)]
    if t.post_norms:
        specs.append(TensorSpec("post_ffn_norm", p + "post_ffw_norm.weight", (c.n_embd,), False))
    return specs


def _linear_attention_specs(c: ModelConfig, p: str) -> list[TensorSpec]:
    """Gated DeltaNet (llama.cpp's qwen35 names). Hk/Hv key/value heads of Dk/Dv; conv over q|k|v channels."""
    hv, value_dim = c.ssm_v_heads, c.ssm_v_heads * c.ssm_v_dim
    return [TensorSpec("attn_norm", p + "attn_norm.weight", (c.n_embd,), False),
            TensorSpec("wqkv", p + "attn_qkv.weight", (c.conv_dim, c.n_embd), True),      # q | k | v
            TensorSpec("wz", p + "attn_gate.weight", (value_dim, c.n_embd), True),        # gate of the norm
            TensorSpec("w_beta", p + "ssm_beta.weight", (hv, c.n_embd), True),
            TensorSpec("w_alpha", p + "ssm_alpha.weight", (hv, c.n_embd), True),
            TensorSpec("conv", p + "ssm_conv1d.weight", (c.conv_dim, c.ssm_conv_kernel), False),
            TensorSpec("dt_bias", p + "ssm_dt.bias", (hv,), False),
            TensorSpec("ssm_a", p + "ssm_a", (hv,), False),                               # -exp(A_log)
            TensorSpec("ssm_norm", p + "ssm_norm.weight", (c.ssm_v_dim,), False),
            TensorSpec("wo", p + "ssm_out.weight", (c.n_embd, value_dim), True)]


def _moe_ffn_specs(c: ModelConfig, p: str) -> list[TensorSpec]:
    """Router [n_expert, n_embd] and the experts stacked as llama.cpp's converter writes them (per expert the
    gate/up rows [n_ff_exp, n_embd] and down [n_embd, n_ff_exp]); gpt-oss adds biases to all four."""
    t = ARCHITECTURES[c.arch]
    n, e, f = c.n_expert, c.n_embd, c.n_ff_exp
    specs = [TensorSpec("ffn_norm", p + t.ffn_norm_name + ".weight", (e,), False),
             TensorSpec("router", p + "ffn_gate_inp.weight", (n, e), True),
             TensorSpec("exp_gate", p + "ffn_gate_exps.weight", (n, f, e), True, experts=True),
             TensorSpec("exp_up", p + "ffn_up_exps.weight", (n, f, e), True, experts=True),
             TensorSpec("exp_down", p + "ffn_down_exps.weight", (n, e, f), True, experts=True)]
    if t.moe_biases:
        specs += [TensorSpec("router_bias", p + "ffn_gate_inp.bias", (n,), False),
                  TensorSpec("exp_gate_bias", p + "ffn_gate_exps.bias", (n, f), False),
                  TensorSpec("exp_up_bias", p + "ffn_up_exps.bias", (n, f), False),
                  TensorSpec("exp_down_bias", p + "ffn_down_exps.bias", (n, e), False)]
    return specs


_MIXER_SPECS = {"attention": _attention_specs, "linear_attention": _linear_attention_specs}
_FFN_SPECS = {"dense": _ffn_specs, "moe": _moe_ffn_specs}


def layer_tensor_specs(config: ModelConfig, layer: int) -> tuple[TensorSpec, ...]:
    """The tensors of layer `layer`: its mixer (by `config.layer_kinds[layer]`), then its FFN (by
    `config.ffn_kind`)."""
    p = f"blk.{layer}."
    return tuple(_MIXER_SPECS[config.layer_kinds[layer]](config, p) + _FFN_SPECS[config.ffn_kind](config, p))


def is_expert_tensor(name: str) -> bool:
    """A stacked-experts matrix (`blk.N.ffn_{gate,up,down}_exps.weight`, TensorSpec.experts)."""
    return name.endswith("_exps.weight")


def global_tensor_specs(config: ModelConfig) -> tuple[TensorSpec, ...]:
    c = config
    return (TensorSpec("token_embd", "token_embd.weight", (c.vocab_size, c.n_embd), True),
            TensorSpec("output_norm", "output_norm.weight", (c.n_embd,), False),
            TensorSpec("output", "output.weight", (c.vocab_size, c.n_embd), True, required=False),  # absent: tied
            TensorSpec("rope_freqs", "rope_freqs.weight", (c.rope_dim // 2,), False, required=False))


# rope --------------------------------------------------------------------------------------------------
def rope_inv_freq(config: ModelConfig, freq_factors: np.ndarray | None = None) -> np.ndarray:
    """[n_layers, rope_dim / 2] float64 inverse frequencies: freq_scale * theta^(-2i / rope_dim), divided by
    `freq_factors` (GGUF `rope_freqs.weight`, Llama 3.1+ long-context rope) as llama.cpp does; with YaRN
    (`config.rope_yarn_factor`) blended between interpolated and original frequencies (`_yarn`). The CPU and
    GPU forward passes both rotate by exactly these numbers (and scale cos/sin by rope_attention_factor)."""
    half = config.rope_dim // 2
    exps = -np.arange(half, dtype=np.float64) * 2.0 / config.rope_dim
    table = np.stack([scale * theta ** exps
                      for theta, scale in zip(config.rope_theta, config.rope_freq_scale, strict=True)])
    if config.rope_yarn_factor:
        table = np.stack([_yarn(config, row, theta) for row, theta in zip(table, config.rope_theta, strict=True)])
    if freq_factors is not None:
        table = table / np.asarray(freq_factors, dtype=np.float64)[None, :]
    return table


def _yarn(c: ModelConfig, inv_freq: np.ndarray, theta: float) -> np.ndarray:
    """YaRN (arXiv 2309.00071, transformers' _compute_yarn_parameters): dims that turn fewer than beta_slow
    times over the original context are interpolated (divided by factor), those that turn more than beta_fast
    times keep their frequency, a linear ramp between."""
    dim = c.rope_dim

    def correction_dim(rotations: float) -> float:
        return dim * np.log(c.rope_yarn_orig_ctx / (rotations * 2 * np.pi)) / (2 * np.log(theta))

    low, high = correction_dim(c.rope_yarn_beta_fast), correction_dim(c.rope_yarn_beta_slow)
    if ARCHITECTURES[c.arch].yarn_truncate:
        low, high = np.floor(low), np.ceil(high)
    low, high = max(low, 0.0), min(high, dim - 1.0)
    if low == high:
        high += 0.001
    ramp = np.clip((np.arange(len(inv_freq), dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    keep = 1.0 - ramp                                     # 1: original frequency, 0: interpolated
    return inv_freq / c.rope_yarn_factor * (1.0 - keep) + inv_freq * keep


def rope_attention_factor(config: ModelConfig) -> float:
    """What cos and sin are multiplied by: YaRN's 0.1 ln(factor) + 1 (so q.k grows by its square), else 1."""
    f = config.rope_yarn_factor
    return 0.1 * float(np.log(f)) + 1.0 if f > 1.0 else 1.0


# memory ------------------------------------------------------------------------------------------------
# KV cache element types: bytes per value. "f32" (the default) is exact: both paths match transformers float32.
# "f16" (GPU only, what llama.cpp keeps by default) halves the cache and the bytes a decode step reads at depth;
# K and V are rounded to f16 when written (about 3 decimal digits per value).
KV_CACHE_TYPES = {"f32": 4, "f16": 2}
KvCacheType = Literal["f32", "f16"]
DEFAULT_KV_CACHE_TYPE: KvCacheType = "f32"
TOKEN_ID_BYTES = 4           # the GPU cache keeps the token id of every slot (the repetition penalty's history)
ALLOC_GRANULARITY = 512      # cudaMalloc/hipMalloc round small allocations up to at least this
VECTOR_NAMES = ("norm", "bias")   # tensor names holding vectors uploaded as float32


def _round(n: int) -> int:
    return -(-n // ALLOC_GRANULARITY) * ALLOC_GRANULARITY


def n_attention_layers(config: ModelConfig) -> int:
    return sum(kind == "attention" for kind in config.layer_kinds)


def kv_cache_type(name: str, backend: Backend) -> KvCacheType:
    """`name` checked against KV_CACHE_TYPES; the CPU path keeps float32 whatever is asked (its kernels and
    goldens are float32), so it gets "f32"."""
    if name not in KV_CACHE_TYPES:
        raise ValueError(f"KV cache type must be one of {', '.join(KV_CACHE_TYPES)}, not {name!r}")
    return name if backend == "gpu" else "f32"            # type: ignore[return-value]


# The tensor-core prefill attention tile's heads (halo_layer.cu FA_MAX_D, and FA_MAX_ROWS = FA_ROWS[-1]): a block of
# FA_ROWS[0] or FA_ROWS[-1] query rows holds whole GQA groups; head dims to FA_MAX_D in steps of 8.
FA_ROWS, FA_MAX_D = (64, 128), 128


def flash_usable(config: ModelConfig) -> bool:
    """Whether the model's heads fit the tensor-core prefill attention tile (engine.gpu.forward runs it on CUDA
    sm_80+; wider heads, such as gemma-3's and Qwen3.5's 256, take the SIMT tile or halo_attention)."""
    c = config
    return (c.head_dim % 8 == 0 and c.head_dim <= FA_MAX_D and c.n_head_kv > 0 and c.n_head % c.n_head_kv == 0
            and c.n_head // c.n_head_kv <= FA_ROWS[0])


# A GPU float32 cache's prefill split copy (engine.gpu.forward.GpuKVCache, halo_layer.cu's halo_kv_split), for the
# tensor-core tile's float32 build: one attention layer's K and V again as f16 heads and tails (4 bytes an element,
# as the cache), and a float4 of the tiles' factors per KV_SPLIT_SCALE_KEYS slots and kv head. None where the model's
# heads do not fit that tile. Counted on every GPU (an estimate does not know the device): HIP, which runs the SIMT
# tile, holds the copy without reading it.
KV_SPLIT_SCALE_KEYS = 16


def kv_split_bytes_per_token(config: ModelConfig, backend: Backend, kv_type: str) -> int:
    if (backend != "gpu" or kv_cache_type(kv_type, backend) != "f32" or not n_attention_layers(config)
            or not flash_usable(config)):
        return 0
    return 2 * config.kv_dim * 4 + config.n_head_kv * 16 // KV_SPLIT_SCALE_KEYS


def kv_bytes_per_token(config: ModelConfig, backend: Backend = "cpu", kv_type: str = DEFAULT_KV_CACHE_TYPE) -> int:
    """Bytes of paged KV cache one token occupies (K and V of every attention layer; on a GPU also the token id
    at its slot and a float32 cache's prefill split copy)."""
    per = 2 * n_attention_layers(config) * config.kv_dim * KV_CACHE_TYPES[kv_cache_type(kv_type, backend)]
    return per + (TOKEN_ID_BYTES if backend == "gpu" else 0) + kv_split_bytes_per_token(config, backend, kv_type)


def kv_cache_bytes(config: ModelConfig, num_blocks: int, block_size: int = BLOCK_SIZE,
                   backend: Backend = "cpu", kv_type: str = DEFAULT_KV_CACHE_TYPE) -> int:
    return num_blocks * block_size * kv_bytes_per_token(config, backend, kv_type)


def recurrent_state_shapes(config: ModelConfig) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per sequence and linear-attention layer: the conv state [kernel - 1, conv_dim] (the last inputs of the
    causal conv) and the delta-rule state [Hv, Dk, Dv]."""
    c = config
    return (max(0, c.ssm_conv_kernel - 1), c.conv_dim), (c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim)


def recurrent_state_bytes(config: ModelConfig) -> int:
    """Per sequence: the float32 recurrent state of every linear-attention layer (0 for pure-attention models)."""
    n_linear = sum(kind == "linear_attention" for kind in config.layer_kinds)
    if not n_linear:
        return 0
    conv, ssm = recurrent_state_shapes(config)
    return n_linear * 4 * (int(np.prod(conv)) + int(np.prod(ssm)))


CPU_FLOAT32_MATRICES = ("ffn_gate_inp",)   # the MoE router: a small product the CPU does in float32


def cpu_keeps_quantized(t, kernel_blocks) -> bool:
    """Whether the CPU holds TensorInfo `t` in the file's type rather than as float32: stacked experts always;
    other matrices when a compiled kernel exists for their type (`kernel_blocks`: type -> elements per
    kernel block, engine.model.quant_matrix.kernel_blocks(); empty on the numpy path) and the row length is
    a whole number of its blocks. Vectors, F32 tensors and the MoE router are float32."""
    if is_expert_tensor(t.name):
        return True
    if len(t.shape) != 2 or any(k in t.name for k in VECTOR_NAMES + CPU_FLOAT32_MATRICES):
        return False
    block = kernel_blocks.get(t.ggml_type)
    return block is not None and t.shape[-1] % block == 0


def weight_bytes(tensors, backend: Backend, kernel_blocks=None) -> int:
    """`tensors`: the GGUF's TensorInfos. GPU: quantized matrices upload as they are in the file, vectors as
    float32, each allocation rounded up. CPU: tensors it keeps quantized (cpu_keeps_quantized; `kernel_blocks`
    defaults to this machine's) at their file size, the rest as float32."""
    if backend == "cpu":
        if kernel_blocks is None:
            from engine.model.quant_matrix import kernel_blocks as available
            kernel_blocks = available()
        return sum(t.nbytes if cpu_keeps_quantized(t, kernel_blocks) else t.n_elements * 4 for t in tensors)
    total = 0
    for t in tensors:
        if len(t.shape) == 1 or any(k in t.name for k in VECTOR_NAMES):
            total += _round(t.n_elements * 4)
        else:
            total += _round(t.nbytes)
    return total


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    recurrent_state: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.recurrent_state


def context_blocks(config: ModelConfig, ctx: int) -> int:
    """KV blocks of BLOCK_SIZE a context of `ctx` tokens takes, capped at the trained length."""
    return -(-min(ctx, config.context_length) // BLOCK_SIZE)


def memory_estimate(config: ModelConfig, ctx: int, backend: Backend, tensors=(), num_seqs: int = 1,
                    kv_type: str = DEFAULT_KV_CACHE_TYPE) -> MemoryEstimate:
    """What loading the model with a context of `ctx` tokens (capped at the trained length) costs on
    `backend`: weights (from the GGUF `tensors`), the KV cache and `num_seqs` sequences' recurrent state.
    Scratch activations and the runtime's reserve are not included (the load pre-flights add them)."""
    return blocks_memory_estimate(config, context_blocks(config, ctx), BLOCK_SIZE, backend, tensors, num_seqs,
                                  kv_type)


def blocks_memory_estimate(config: ModelConfig, num_blocks: int, block_size: int, backend: Backend, tensors=(),
                           num_seqs: int = 1, kv_type: str = DEFAULT_KV_CACHE_TYPE) -> MemoryEstimate:
    """memory_estimate for a cache of `num_blocks` blocks of `block_size` (not capped): what the load
    pre-flights (engine.gpu.preflight.plan_memory, engine.model.host_memory.plan_host_memory) start from."""
    return MemoryEstimate(weights=weight_bytes(tensors, backend),
                          kv_cache=kv_cache_bytes(config, num_blocks, block_size, backend, kv_type),
                          recurrent_state=num_seqs * recurrent_state_bytes(config))
