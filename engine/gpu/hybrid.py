"""Qwen3.5's layer kinds on the GPU: Gated-DeltaNet linear attention and gated full attention.

Kernels: engine/backends/kernels/halo_delta_net.cu (engine.model.delta_net is the float32 reference).
A linear-attention layer, T tokens of S sequences (8 launches; 9 when the chunked kernel runs too):
    [wqkv] -> lin_qkv [T, C]; [wz] -> z [T, Hv Dv]; [w_beta, w_alpha] -> ab [T, 2 Hv]
    -> conv + SiLU (in place, rolls the conv state) -> prep (q/k L2-normalised, beta and the log decay, in
    place) -> delta rule: the recurrent form (token by token, the state in registers) - or, with
    HALO_DELTA_CHUNKED=1 (see chunked_usable), the chunked form (chunks of DC_CHUNK tokens, a few small matrix
    products each) for sequences with >= CHUNKED_MIN tokens this step: then both launch, each skipping the
    other's sequences -> gated RMSNorm -> ssm_out into the residual input.
The recurrent state lives in GpuRecurrentState, one slot per scheduler StateSlot: a sequence whose first
token this step is at position 0 starts from zeros (kernel-side), so a preempted sequence's slot needs no
clearing and recompute rebuilds it, exactly as on the CPU.
Gated attention: attn_q's rows are per head [q_h | gate_h]; its product goes to `qg`, the q half is copied
into the fused qkv buffer (halo_split_q_gate), and the attention output is multiplied by sigmoid(gate).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from engine.backends.base import Backend, DeviceBuffer
from engine.model.arch import recurrent_state_shapes
from engine.model.config import ModelConfig

FILE = "halo_delta_net.cu"
KERNELS = ("halo_conv_silu", "halo_delta_prep", "halo_delta_rule", "halo_delta_chunked", "halo_gated_norm",
           "halo_output_gate", "halo_split_q_gate")
CONV_CHANNELS, CONV_SPANS = 32, 8   # halo_conv_silu's block: channels x spans of a sequence's tokens
CONV_MAX_K = 8                # halo_conv_silu's register window
DELTA_THREADS = 256           # 8 warps: halo_delta_chunked's block (32 state columns); halo_delta_rule's DR_THREADS
RULE_COLUMNS = 16             # halo_delta_rule's state columns per block: DR_BLOCK_COLS (2 per warp)
CHUNKED_MIN = 16              # a sequence with this many tokens in a step takes the chunked delta rule
CHUNKED_MAX_DK = 128          # halo_delta_chunked's DC_MAX_DK (its shared memory); above it, recurrent only
RECURRENT_MAX_DK = 256        # halo_delta_rule: DR_GROUPS x DR_ROWS state rows in a warp's registers
NEVER = 2**31 - 1


def chunked_usable(config: ModelConfig) -> bool:
    """Whether long sequences take the chunked kernel: only with HALO_DELTA_CHUNKED=1. It gives the same
    numbers (tests/gpu/test_gpu_delta_net.py) but is slower as written: on the H200, 4B shapes, a 128-token
    prefill spent ~10 ms in it over 24 layers against ~4.4 ms in the recurrent kernel (engine/gpu/NOTES.md)."""
    return config.ssm_k_dim <= CHUNKED_MAX_DK and os.environ.get("HALO_DELTA_CHUNKED") == "1"


@dataclass(frozen=True)
class DeviceLinearLayer:
    """A Gated-DeltaNet layer's weights (engine.model.arch._linear_attention_specs roles) + its FFN."""
    attn_norm: DeviceBuffer
    wqkv: object                  # DeviceMatrix [C, n_embd]
    wz: object                    # DeviceMatrix [Hv Dv, n_embd]
    w_beta: object                # DeviceMatrix [Hv, n_embd]
    w_alpha: object               # DeviceMatrix [Hv, n_embd]
    conv: DeviceBuffer            # float32 [C, K]
    dt_bias: DeviceBuffer         # [Hv]
    ssm_a: DeviceBuffer           # [Hv], -exp(A_log)
    ssm_norm: DeviceBuffer        # [Dv]
    wo: object                    # DeviceMatrix ssm_out [n_embd, Hv Dv]
    ffn_norm: DeviceBuffer
    w_gate: object
    w_up: object
    w_down: object
    post_attn_norm: None = None
    post_ffn_norm: None = None
    moe: None = None

    @property
    def matrices(self) -> tuple:
        return self.wqkv, self.wz, self.w_beta, self.w_alpha, self.wo, self.w_gate, self.w_up, self.w_down


class GpuRecurrentState:
    """Per linear-attention layer: conv [slots, K-1, C] and delta [slots, Hv, Dk, Dv] float32, one allocation
    (engine.model.arch.recurrent_state_shapes; the pre-flight counts recurrent_state_bytes per slot)."""

    def __init__(self, backend: Backend, config: ModelConfig, slots: int, stream):
        from engine.gpu.forward import view
        self.backend, self.slots = backend, slots
        conv_shape, delta_shape = recurrent_state_shapes(config)
        n_conv, n_delta = slots * int(np.prod(conv_shape)), slots * int(np.prod(delta_shape))
        linear = [i for i, kind in enumerate(config.layer_kinds) if kind == "linear_attention"]
        per = n_conv + n_delta
        self.storage = backend.alloc(max(1, len(linear) * per), np.float32)
        self.nbytes = len(linear) * per * 4
        backend.memset_async(self.storage, 0, stream)
        self.conv: list[DeviceBuffer | None] = [None] * config.n_layers
        self.delta: list[DeviceBuffer | None] = [None] * config.n_layers
        for j, i in enumerate(linear):
            self.conv[i] = view(self.storage, j * per, n_conv)
            self.delta[i] = view(self.storage, j * per + n_conv, n_delta)

    def free(self) -> None:
        self.backend.free(self.storage)


class HybridScratch:
    """Activations of the linear-attention layers and of the output gate, sized for `max_tokens` tokens."""

    def __init__(self, backend: Backend, config: ModelConfig, max_tokens: int):
        c, T = config, max_tokens
        value_dim = c.ssm_v_heads * c.ssm_v_dim
        self.lin_qkv = backend.alloc((T, max(1, c.conv_dim)), np.float32)
        self.z = backend.alloc((T, max(1, value_dim)), np.float32)
        self.ab = backend.alloc((T, max(1, 2 * c.ssm_v_heads)), np.float32)
        self.out = backend.alloc((T, max(1, value_dim)), np.float32)
        self.qg = backend.alloc((T, 2 * c.q_dim if c.attn_output_gate else 1), np.float32)
        self.buffers = [self.lin_qkv, self.z, self.ab, self.out, self.qg]
        self.chunked = c.has_recurrent_state and chunked_usable(c)


def enqueue_delta_net(launch, c: ModelConfig, T: int, S: int, qkv, ab, conv_state, delta_state, out, conv_w,
                      ssm_a, dt_bias, meta, chunked: bool) -> None:
    """conv + SiLU, prep, delta rule (recurrent, and chunked when `chunked` and some sequence may have
    CHUNKED_MIN tokens) for T tokens of S sequences: qkv [T, C] and ab [T, 2 Hv] are rewritten in place, out
    [T, Hv Dv] gets the rule's output (before the gated norm). launch(name, grid, block, args); meta: the
    device qsl, state slots and positions."""
    hk, hv, dk, dv = c.ssm_k_heads, c.ssm_v_heads, c.ssm_k_dim, c.ssm_v_dim
    C, dims = c.conv_dim, (np.int32(hk), np.int32(hv), np.int32(dk), np.int32(dv))
    launch("halo_conv_silu", (-(-C // CONV_CHANNELS), S), CONV_CHANNELS * CONV_SPANS,
           (qkv, conv_state, conv_w, *meta, np.int32(C), np.int32(c.ssm_conv_kernel)))
    launch("halo_delta_prep", (T, hk), 128, (qkv, ab, ssm_a, dt_bias, *dims, np.float32(c.norm_eps)))
    chunked = chunked and T - (S - 1) >= CHUNKED_MIN       # the longest sequence has at most T - (S - 1) tokens
    rule_args = (qkv, ab, delta_state, out, *meta, *dims, np.int32(CHUNKED_MIN if chunked else NEVER))
    launch("halo_delta_rule", (hv, -(-dv // RULE_COLUMNS), S), DELTA_THREADS, rule_args)
    if chunked:
        launch("halo_delta_chunked", (hv, -(-dv // 32), S), DELTA_THREADS, rule_args)


def enqueue_linear_attention(fwd, L: DeviceLinearLayer, kv, T: int, S: int, layer: int) -> None:
    """fwd.h (normed input) -> fwd.o (the mixer's output, before the residual add). S: this step's sequences
    (exactly: the kernels' grid walks qsl[0..S])."""
    c, s = fwd.config, fwd.hybrid
    hv, dv = c.ssm_v_heads, c.ssm_v_dim
    fwd._matmul([L.wqkv], fwd.h, T, s.lin_qkv, c.conv_dim)
    fwd._matmul([L.wz], fwd.h, T, s.z, hv * dv)
    fwd._matmul([L.w_beta, L.w_alpha], fwd.h, T, s.ab, 2 * hv)
    enqueue_delta_net(lambda name, grid, block, args: fwd._launch(FILE, name, grid, block, args), c, T, S,
                      s.lin_qkv, s.ab, kv.recurrent.conv[layer], kv.recurrent.delta[layer], s.out, L.conv, L.ssm_a,
                      L.dt_bias, (kv.qsl, kv.state_slots, kv.positions), s.chunked)
    block = -(-dv // 32) * 32                   # whole warps: block_sum's shuffles span 32 lanes
    fwd._launch(FILE, "halo_gated_norm", (hv, T), block,
                (s.out, s.z, L.ssm_norm, np.int32(hv), np.int32(dv), np.float32(c.norm_eps)))
    fwd._matmul([L.wo], s.out, T, fwd.o, c.n_embd)


def enqueue_gated_qkv(fwd, L, T: int) -> None:
    """attn_q -> qg [T, 2 q_dim]; k, v -> the fused qkv buffer after the q part; q copied in from qg."""
    from engine.gpu.forward import view
    c, s = fwd.config, fwd.hybrid
    fwd._matmul([L.wq], fwd.h, T, s.qg, 2 * c.q_dim)
    fwd._matmul([L.wk, L.wv], fwd.h, T, view(fwd.qkv, c.q_dim, T * fwd.qkv_width - c.q_dim), fwd.qkv_width)
    n = T * c.q_dim
    fwd._launch(FILE, "halo_split_q_gate", -(-n // 256), 256,
                (fwd.qkv, np.int32(fwd.qkv_width), s.qg, np.int32(T), np.int32(c.n_head), np.int32(c.head_dim)))


def enqueue_output_gate(fwd, T: int) -> None:
    c = fwd.config
    fwd._launch(FILE, "halo_output_gate", -(-T * c.q_dim // 256), 256,
                (fwd.attn, fwd.hybrid.qg, np.int32(T), np.int32(c.n_head), np.int32(c.head_dim)))
