"""ModelConfig: every hyperparameter the forward pass needs, read once from GGUF metadata and validated.

Frozen: built once per load, shared read-only by the CPU and GPU forward passes and the scheduler.
Architecture differences are expressed as data (flags, scales, per-layer tuples), so the forward pass has
no `if arch == ...` branches.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import InvalidModelError, UnsupportedModelError, short_repr
from engine.gguf.meta import REQUIRED, Meta
from engine.model.arch import ARCHITECTURES, Activation, ExpertActivation, FfnKind, LayerKind, RopeStyle

SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)

# Sanity caps: far above any real model, low enough that a hostile file cannot ask for absurd buffers.
_MAX_LAYERS = 1024
_MAX_EMBD = 1 << 17
_MAX_HEADS = 4096
_MAX_HEAD_DIM = 1024
_MAX_CONTEXT = 1 << 24
_MAX_VOCAB = 1 << 22
_MAX_FFN = 1 << 20
_MAX_EXPERTS = 1 << 12
MIN_CONTEXT = 16                         # a chat needs room for a prompt and a reply
_MIN_NORM_EPS, _MAX_NORM_EPS = 1e-12, 1e-2
_MIN_FREQ_BASE, _MAX_FREQ_BASE = 1.0, 1e10
_MIN_ROPE_FACTOR, _MAX_ROPE_FACTOR = 1e-3, 1e4
_MIN_ATTN_SCALE, _MAX_ATTN_SCALE = 1e-6, 1e3


@dataclass(frozen=True)
class ModelConfig:
    arch: str
    n_layers: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int                 # per-head size of q, k and v
    n_ff: int                     # FFN hidden size
    vocab_size: int
    context_length: int           # trained maximum
    norm_eps: float
    rope_dim: int                 # leading dims of each head that are rotated (== head_dim for all we run)
    rope_style: RopeStyle
    rope_theta: tuple[float, ...]       # per layer (gemma3: local base on sliding layers)
    rope_freq_scale: tuple[float, ...]  # per layer; 1/factor for linear rope scaling, else 1.0
    sliding_window: int                 # 0: no sliding layers
    sliding_layers: tuple[bool, ...]    # per layer: keys older than `sliding_window` positions are masked
    attn_scale: float                   # multiplies q.k
    embed_scale: float                  # multiplies the token embedding (gemma: sqrt(n_embd))
    activation: Activation              # applied to the gate projection; out = act(gate) * up
    has_qkv_bias: bool                  # qwen2
    has_qk_norm: bool                   # per-head RMSNorm of q and k before rope (gemma3, qwen3)
    has_post_norms: bool                # RMSNorm on the attention and FFN outputs before the residual (gemma3)
    layer_kinds: tuple[LayerKind, ...] = ()   # per layer; () means every layer is "attention"
    attn_output_gate: bool = False      # attention output times sigmoid(gate), gate from attn_q (qwen35)
    # Gated DeltaNet (linear-attention layers, qwen35): conv kernel, key/value heads and their sizes
    ssm_conv_kernel: int = 0
    ssm_k_heads: int = 0
    ssm_v_heads: int = 0
    ssm_k_dim: int = 0
    ssm_v_dim: int = 0
    # mixture of experts (qwen3moe, gpt-oss): n_expert experts of hidden size n_ff_exp, n_expert_used per token
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0
    expert_activation: ExpertActivation = "swiglu"
    # YaRN rope scaling (gpt-oss): factor (0: none), the trained context it extends, the ramp's rotation bounds
    rope_yarn_factor: float = 0.0
    rope_yarn_orig_ctx: int = 0
    rope_yarn_beta_fast: float = 32.0
    rope_yarn_beta_slow: float = 1.0

    def __post_init__(self):
        if not self.layer_kinds:
            object.__setattr__(self, "layer_kinds", ("attention",) * self.n_layers)

    @property
    def n_group(self) -> int:
        """Query heads per KV head (grouped-query attention)."""
        return self.n_head // self.n_head_kv

    @property
    def q_dim(self) -> int:
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def conv_dim(self) -> int:
        """Channels of a linear-attention layer's causal conv: q | k | v."""
        return 2 * self.ssm_k_heads * self.ssm_k_dim + self.ssm_v_heads * self.ssm_v_dim

    @property
    def ffn_kind(self) -> FfnKind:
        return "moe" if self.n_expert else "dense"

    @property
    def has_recurrent_state(self) -> bool:
        return "linear_attention" in self.layer_kinds

    @staticmethod
    def from_metadata(meta: dict[str, Any]) -> ModelConfig:
        arch = Meta.of(meta).get_str("general.architecture", REQUIRED)
        if arch not in SUPPORTED_ARCHITECTURES:
            raise UnsupportedModelError(
                f"Architecture {short_repr(arch)} is not supported; this engine runs: {', '.join(SUPPORTED_ARCHITECTURES)}")
        return _build(arch, _Reader(meta, arch))


class _Reader:
    """`<arch>.<key>` hyperparameters through the typed metadata accessor (engine.gguf.meta)."""

    def __init__(self, meta: dict[str, Any], arch: str):
        self.meta = Meta.of(meta)
        self.arch = arch

    def int(self, key: str, lo: int, hi: int, default: int | None = None, per_layer: bool = True) -> int:
        """`per_layer`: a per-layer array is allowed (and must be uniform); else only a scalar."""
        name = f"{self.arch}.{key}"
        get = self.meta.get_int_or_per_layer if per_layer else self.meta.get_int
        value = get(name, REQUIRED if default is None else default, lo=lo, hi=hi)
        if isinstance(value, np.ndarray):   # per-layer arrays: we need them uniform
            if not len(value) or (value != value[0]).any():
                raise UnsupportedModelError(f"{name} varies per layer ({short_repr(value.tolist())}); not supported")
            value = int(value[0])
        return value

    def float(self, key: str, default: float | None = None, lo: float = 0.0, hi: float | None = None) -> float:
        """A finite number in [lo, hi] that is above zero."""
        name = f"{self.arch}.{key}"
        value = self.meta.get_float(name, REQUIRED if default is None else default, lo=lo, hi=hi)
        if value <= 0:
            raise InvalidModelError(f"{name} = {value} must be a positive finite number", field=name)
        return value


def _vocab_size(meta: dict[str, Any], r: _Reader) -> int:
    tokens = r.meta.get_str_array("tokenizer.ggml.tokens")
    default = len(tokens) if tokens is not None else None
    return r.int("vocab_size", 1, _MAX_VOCAB, default)


def _build(arch: str, r: _Reader) -> ModelConfig:
    n_layers = r.int("block_count", 1, _MAX_LAYERS, per_layer=False)
    n_embd = r.int("embedding_length", 1, _MAX_EMBD, per_layer=False)
    n_head = r.int("attention.head_count", 1, _MAX_HEADS)
    n_head_kv = r.int("attention.head_count_kv", 1, _MAX_HEADS, n_head)
    if n_head % n_head_kv:
        raise InvalidModelError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}",
                                field=f"{arch}.attention.head_count_kv")
    if f"{arch}.attention.key_length" not in r.meta and n_embd % n_head:
        raise InvalidModelError(f"embedding_length {n_embd} is not divisible by head_count {n_head}",
                                field=f"{arch}.attention.head_count")
    head_dim = r.int("attention.key_length", 1, _MAX_HEAD_DIM, n_embd // n_head)
    v_dim = r.int("attention.value_length", 1, _MAX_HEAD_DIM, head_dim)
    if v_dim != head_dim:
        raise UnsupportedModelError(f"key_length {head_dim} != value_length {v_dim} is not supported")
    rope_dim = r.int("rope.dimension_count", 2, head_dim, head_dim)
    if rope_dim % 2:
        raise InvalidModelError(f"rope.dimension_count {rope_dim} must be even", field=f"{arch}.rope.dimension_count")

    traits = ARCHITECTURES[arch]
    theta = r.float("rope.freq_base", 10000.0, lo=_MIN_FREQ_BASE, hi=_MAX_FREQ_BASE)
    scale = 1.0
    yarn: dict[str, Any] = {}
    scaling_type = r.meta.get_str(f"{arch}.rope.scaling.type", "none", max_len=64)
    if scaling_type == "linear":
        scale = 1.0 / r.float("rope.scaling.factor", 1.0, lo=_MIN_ROPE_FACTOR, hi=_MAX_ROPE_FACTOR)
    elif scaling_type == "yarn":
        yarn = dict(rope_yarn_factor=r.float("rope.scaling.factor", lo=_MIN_ROPE_FACTOR, hi=_MAX_ROPE_FACTOR),
                    rope_yarn_orig_ctx=r.int("rope.scaling.original_context_length", 1, _MAX_CONTEXT, per_layer=False),
                    rope_yarn_beta_fast=r.float("rope.scaling.yarn_beta_fast", 32.0, hi=1e4),
                    rope_yarn_beta_slow=r.float("rope.scaling.yarn_beta_slow", 1.0, hi=1e4))
    elif scaling_type != "none":
        raise UnsupportedModelError(f"rope scaling {scaling_type!r} is not supported (only linear and yarn)")

    every = traits.global_every
    sliding_window = r.int("attention.sliding_window", 0, _MAX_CONTEXT, 0) if every else 0
    # gemma3: every 6th layer (i % 6 == 5) is global, the rest attend to a sliding window (llama.cpp
    # set_swa_pattern(6); transformers layer_types); gpt-oss: every 2nd, so even layers slide. gemma3's
    # sliding layers use their own rope base, unscaled; gpt-oss's rotate as the global ones.
    sliding = tuple(every > 0 and sliding_window > 0 and (i + 1) % every != 0 for i in range(n_layers))
    local = traits.sliding_rope_base
    rope_theta = tuple(local if s and local else theta for s in sliding)
    rope_freq_scale = tuple(1.0 if s and local else scale for s in sliding)

    if arch == "gemma3":
        # llama.cpp: 1/sqrt(head_dim), except gemma3-27B (62 layers) which uses query_pre_attn_scalar =
        # n_embd / n_head. transformers' query_pre_attn_scalar agrees (256 = head_dim for 270m).
        q_scalar = n_embd / n_head if n_layers == 62 else head_dim
        attn_scale = 1.0 / math.sqrt(q_scalar)
    else:
        attn_scale = 1.0 / math.sqrt(head_dim)
    attn_scale = r.float("attention.scale", attn_scale, lo=_MIN_ATTN_SCALE, hi=_MAX_ATTN_SCALE)

    hybrid = _hybrid_fields(r, n_layers) if traits.hybrid else {}
    layer_kinds = hybrid.pop("layer_kinds", ("attention",) * n_layers)
    moe = _moe_fields(r) if traits.moe else {}
    return ModelConfig(
        arch=arch,
        n_layers=n_layers,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_ff=r.int("feed_forward_length", 1, _MAX_FFN, moe.get("n_ff_exp")),
        vocab_size=_vocab_size(r.meta, r),
        context_length=r.int("context_length", MIN_CONTEXT, _MAX_CONTEXT, per_layer=False),
        norm_eps=r.float("attention.layer_norm_rms_epsilon", 1e-6, lo=_MIN_NORM_EPS, hi=_MAX_NORM_EPS),
        rope_dim=rope_dim,
        rope_style=traits.rope_style,
        rope_theta=rope_theta,
        rope_freq_scale=rope_freq_scale,
        sliding_window=sliding_window,
        sliding_layers=sliding,
        attn_scale=attn_scale,
        embed_scale=math.sqrt(n_embd) if traits.embed_scale_sqrt else 1.0,
        activation=traits.activation,
        has_qkv_bias=traits.qkv_bias,
        has_qk_norm=traits.qk_norm,
        has_post_norms=traits.post_norms,
        layer_kinds=layer_kinds,
        attn_output_gate=traits.output_gate,
        **hybrid,
        **moe,
        **yarn,
    )


def _moe_fields(r: _Reader) -> dict[str, Any]:
    """Mixture of experts: `expert_count` experts of `expert_feed_forward_length`, `expert_used_count` per token."""
    n_expert = r.int("expert_count", 1, _MAX_EXPERTS, per_layer=False)
    used = r.int("expert_used_count", 1, n_expert, per_layer=False)
    return dict(n_expert=n_expert, n_expert_used=used, n_ff_exp=r.int("expert_feed_forward_length", 1, _MAX_FFN),
                expert_activation=ARCHITECTURES[r.arch].expert_activation)


def _hybrid_fields(r: _Reader, n_layers: int) -> dict[str, Any]:
    """qwen35: which layers are linear attention (`attention.recurrent_layers`, else every
    `full_attention_interval`-th layer is full attention, as llama.cpp reads it) and the DeltaNet sizes."""
    key = f"{r.arch}.attention.recurrent_layers"
    recurrent = r.meta.get_array(key, None, kind="bool")
    if recurrent is not None:
        flags = recurrent.tolist()
        if len(flags) < n_layers:            # llama.cpp allows extra entries (an MTP block past the stack)
            raise InvalidModelError(f"{key} has {len(flags)} flags for {n_layers} layers", field=key)
        kinds = tuple("linear_attention" if flags[i] else "attention" for i in range(n_layers))
    else:
        every = r.int("full_attention_interval", 1, _MAX_LAYERS, 4)
        kinds = tuple("attention" if (i + 1) % every == 0 else "linear_attention" for i in range(n_layers))
    k_heads = r.int("ssm.group_count", 1, _MAX_HEADS)
    v_heads = r.int("ssm.time_step_rank", 1, _MAX_HEADS)
    if v_heads % k_heads:
        raise InvalidModelError(f"ssm.time_step_rank {v_heads} is not a multiple of ssm.group_count {k_heads}",
                                field=f"{r.arch}.ssm.time_step_rank")
    inner = r.int("ssm.inner_size", 1, _MAX_FFN)
    if inner % v_heads:
        raise InvalidModelError(f"ssm.inner_size {inner} is not a multiple of ssm.time_step_rank {v_heads}",
                                field=f"{r.arch}.ssm.inner_size")
    return dict(layer_kinds=kinds, ssm_conv_kernel=r.int("ssm.conv_kernel", 1, 64),
                ssm_k_heads=k_heads, ssm_v_heads=v_heads, ssm_k_dim=r.int("ssm.state_size", 1, _MAX_HEAD_DIM),
                ssm_v_dim=inner // v_heads)
