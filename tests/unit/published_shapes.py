"""Header-only stand-ins for the two MoE models the memory tests reason about: their metadata and tensor
tables (names, shapes, quant types, byte sizes) as the published GGUFs have them, no weights.

- Qwen3-30B-A3B Q4_K_M (17.28 GiB, shared/reference skeleton): Q4_K, with Q6_K for attn_v and ffn_down_exps
  on the layers llama.cpp's Q4_K_M recipe gives more bits (the first and last eighth, every third between)
  and for the output; F32 norms and router.
- gpt-oss-20b MXFP4 (ggml-org's file, 12.1 GB): MXFP4 experts, Q8_0 attention, embeddings and output; F32
  norms, biases, sinks and router.
"""
from __future__ import annotations

import numpy as np

from engine.gguf.tensors import TensorInfo
from engine.gguf.types import BLOCK_LAYOUT
from engine.gguf.types import GGMLType as T

QWEN3MOE_30B = {"general.architecture": "qwen3moe", "qwen3moe.block_count": 48, "qwen3moe.context_length": 40960,
                "qwen3moe.embedding_length": 2048, "qwen3moe.feed_forward_length": 6144,
                "qwen3moe.attention.head_count": 32, "qwen3moe.attention.head_count_kv": 4,
                "qwen3moe.attention.key_length": 128, "qwen3moe.attention.value_length": 128,
                "qwen3moe.rope.freq_base": 1e6, "qwen3moe.expert_count": 128, "qwen3moe.expert_used_count": 8,
                "qwen3moe.expert_feed_forward_length": 768, "qwen3moe.vocab_size": 151936}
GPTOSS_20B = {"general.architecture": "gpt-oss", "gpt-oss.block_count": 24, "gpt-oss.context_length": 131072,
              "gpt-oss.embedding_length": 2880, "gpt-oss.feed_forward_length": 2880,
              "gpt-oss.attention.head_count": 64, "gpt-oss.attention.head_count_kv": 8,
              "gpt-oss.attention.key_length": 64, "gpt-oss.attention.value_length": 64,
              "gpt-oss.rope.freq_base": 150000.0, "gpt-oss.expert_count": 32, "gpt-oss.expert_used_count": 4,
              "gpt-oss.expert_feed_forward_length": 2880, "gpt-oss.attention.sliding_window": 128,
              "gpt-oss.rope.scaling.type": "yarn", "gpt-oss.rope.scaling.factor": 32.0,
              "gpt-oss.rope.scaling.original_context_length": 4096, "gpt-oss.vocab_size": 201088}


def _info(name: str, shape: tuple[int, ...], t: T) -> TensorInfo:
    n = int(np.prod(shape))
    block, size = BLOCK_LAYOUT[t]
    return TensorInfo(name, t, shape, tuple(reversed(shape)), 0, n // block * size, n)


def _q4_k_m_more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def qwen3moe_30b_tensors() -> list[TensorInfo]:
    e, L, v, n, f = 2048, 48, 151936, 128, 768
    out = [_info("token_embd.weight", (v, e), T.Q4_K), _info("output_norm.weight", (e,), T.F32),
           _info("output.weight", (v, e), T.Q6_K)]
    for i in range(L):
        b, big = f"blk.{i}.", T.Q6_K if _q4_k_m_more_bits(i, L) else T.Q4_K
        out += [_info(b + "attn_norm.weight", (e,), T.F32), _info(b + "attn_q.weight", (4096, e), T.Q4_K),
                _info(b + "attn_k.weight", (512, e), T.Q4_K), _info(b + "attn_v.weight", (512, e), big),
                _info(b + "attn_q_norm.weight", (128,), T.F32), _info(b + "attn_k_norm.weight", (128,), T.F32),
                _info(b + "attn_output.weight", (e, 4096), T.Q4_K), _info(b + "ffn_norm.weight", (e,), T.F32),
                _info(b + "ffn_gate_inp.weight", (n, e), T.F32), _info(b + "ffn_gate_exps.weight", (n, f, e), T.Q4_K),
                _info(b + "ffn_up_exps.weight", (n, f, e), T.Q4_K), _info(b + "ffn_down_exps.weight", (n, e, f), big)]
    return out


def gptoss_20b_tensors() -> list[TensorInfo]:
    e, L, v, n, f, q, kv = 2880, 24, 201088, 32, 2880, 4096, 512
    out = [_info("token_embd.weight", (v, e), T.Q8_0), _info("output_norm.weight", (e,), T.F32),
           _info("output.weight", (v, e), T.Q8_0)]
    for i in range(L):
        b = f"blk.{i}."
        out += [_info(b + "attn_norm.weight", (e,), T.F32), _info(b + "post_attention_norm.weight", (e,), T.F32),
                _info(b + "attn_q.weight", (q, e), T.Q8_0), _info(b + "attn_q.bias", (q,), T.F32),
                _info(b + "attn_k.weight", (kv, e), T.Q8_0), _info(b + "attn_k.bias", (kv,), T.F32),
                _info(b + "attn_v.weight", (kv, e), T.Q8_0), _info(b + "attn_v.bias", (kv,), T.F32),
                _info(b + "attn_output.weight", (e, q), T.Q8_0), _info(b + "attn_output.bias", (e,), T.F32),
                _info(b + "attn_sinks.weight", (64,), T.F32),
                _info(b + "ffn_gate_inp.weight", (n, e), T.F32), _info(b + "ffn_gate_inp.bias", (n,), T.F32),
                _info(b + "ffn_gate_exps.weight", (n, f, e), T.MXFP4), _info(b + "ffn_gate_exps.bias", (n, f), T.F32),
                _info(b + "ffn_up_exps.weight", (n, f, e), T.MXFP4), _info(b + "ffn_up_exps.bias", (n, f), T.F32),
                _info(b + "ffn_down_exps.weight", (n, e, f), T.MXFP4), _info(b + "ffn_down_exps.bias", (n, e), T.F32)]
    return out
