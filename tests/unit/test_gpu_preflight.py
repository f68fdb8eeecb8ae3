"""The GPU memory pre-flight's arithmetic, on the real tiny GGUFs' tensor tables (no GPU needed)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.errors import OutOfDeviceMemoryError
from engine.gguf import open_gguf
from engine.gpu import preflight
from engine.gpu.stepmeta import MetaLayout, SamplingRow
from engine.model.config import ModelConfig
from engine.model.step import StepInput

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
MIB = 1 << 20


def _open(name):
    g = open_gguf(DATA / name)
    return g, ModelConfig.from_metadata(g.metadata)


def test_weights_stay_quantized_about_the_file_size():
    g, c = _open("tiny-qwen3-q4_k_m.gguf")
    with g:
        tensors = list(g.tensors.values())
        w = preflight.weight_bytes(tensors)
        data = sum(t.nbytes for t in tensors)
        f32 = sum(t.n_elements * 4 for t in tensors)
    assert data <= w <= data + len(tensors) * preflight.ALLOC_GRANULARITY + sum(
        t.n_elements * 4 for t in tensors if len(t.shape) == 1)
    assert w < f32 / 2          # a float32 upload would be over 4x this file's quantized bytes


def test_kv_and_scratch_arithmetic():
    g, c = _open("tiny-llama-f32.gguf")
    g.close()
    # K and V float32 per layer, one int32 token id per slot (the repetition penalty's history), and the prefill
    # split copy: one layer's K and V as f16 heads and tails, a float4 of factors per 16 slots and kv head
    slots, kv_dim = 10 * 16, c.n_head_kv * c.head_dim
    assert preflight.kv_bytes(c, 10, 16) == (2 * c.n_layers * slots * kv_dim * 4 + slots * 4
                                             + 2 * slots * kv_dim * 4 + slots // 16 * c.n_head_kv * 16)
    assert preflight.kv_bytes(c, 10, 16, "f16") == 2 * c.n_layers * slots * kv_dim * 2 + slots * 4     # no copy
    s1 = preflight.scratch_bytes(c, 64, 4, 10)
    s2 = preflight.scratch_bytes(c, 128, 4, 10)
    assert s2 > s1 >= 4 * 4 * c.vocab_size    # logits rows are part of it
    plan = preflight.plan_memory(c, [], 10, 16, 64, 4)
    assert plan.total == plan.weights + plan.kv + plan.scratch + plan.reserve
    assert plan.reserve >= preflight.FIXED_RESERVE


def test_refusal_names_every_figure():
    g, c = _open("tiny-gemma3-q4_k_m.gguf")
    with g:
        plan = preflight.plan_memory(c, list(g.tensors.values()), 1000, 16, 512, 16)
    preflight.check_fits(plan, plan.total, plan.total)          # exactly enough: fine
    with pytest.raises(OutOfDeviceMemoryError) as e:
        preflight.check_fits(plan, plan.total - 1, 8 * plan.total, what="tiny-gemma3")
    msg = str(e.value)
    for part in ("tiny-gemma3", "weights", "KV cache", "scratch", "reserve", f"{plan.total / MIB:.1f} MiB"):
        assert part in msg
    assert e.value.plan is plan


def test_max_kv_blocks_fills_but_fits():
    g, c = _open("tiny-llama-q4_1.gguf")
    with g:
        tensors = list(g.tensors.values())
    free = 2 << 30
    n = preflight.max_kv_blocks(c, tensors, 16, 512, 16, free)
    assert n > 0
    plan = preflight.plan_memory(c, tensors, n, 16, 512, 16)
    assert plan.total <= free
    assert preflight.plan_memory(c, tensors, int(n * 1.2), 16, 512, 16).total > 0.9 * free
    assert preflight.max_kv_blocks(c, tensors, 16, 512, 16, preflight.FIXED_RESERVE) == 0


def test_step_metadata_packing():
    lay = MetaLayout(t_cap=8, s_cap=4, width=5)
    st = StepInput(token_ids=np.array([5, 6, 7], np.int32), positions=np.array([3, 0, 1], np.int32),
                   slot_mapping=np.array([19, 32, 33]), query_start_loc=np.array([0, 1, 3], np.int32),
                   seq_lens=np.array([4, 2], np.int32), block_tables=np.array([[1, 0], [2, 0]], np.int32))
    out = np.full(lay.words, -7, np.int32)
    rows = [SamplingRow(0.7, 40, 0.9, 0.05, seed=0xFFFFFFFF, counter=3), SamplingRow()]
    used = lay.pack(st, rows, out)
    assert used == lay.block_tables + 2 * 5
    assert list(out[lay.ids:lay.ids + 3]) == [5, 6, 7]
    assert list(out[lay.slots:lay.slots + 3]) == [19, 32, 33]
    assert list(out[lay.token_seq:lay.token_seq + 3]) == [0, 1, 1]
    assert list(out[lay.logits_idx:lay.logits_idx + 2]) == [0, 2]
    assert list(out[lay.samp_i:lay.samp_i + 4]) == [40, -1, 3, 0]
    np.testing.assert_allclose(out[lay.samp_f:lay.samp_f + 3].view(np.float32), [0.7, 0.9, 0.05], rtol=1e-6)
    assert list(out[lay.qsl:lay.qsl + 3]) == [0, 1, 3]
    assert list(out[lay.state_slots:lay.state_slots + 2]) == [0, 1]      # StepInput's default slots
    assert list(out[lay.block_tables:lay.block_tables + 10]) == [1, 0, 0, 0, 0, 2, 0, 0, 0, 0]
    with pytest.raises(ValueError):
        lay.pack(st, rows[:1], out)                                   # one sampling row per logits row
    big = StepInput(token_ids=np.zeros(9, np.int32), positions=np.arange(9, dtype=np.int32),
                    slot_mapping=np.arange(9), query_start_loc=np.array([0, 9], np.int32),
                    seq_lens=np.array([9], np.int32), block_tables=np.zeros((1, 1), np.int32))
    with pytest.raises(ValueError, match="capacity"):
        lay.pack(big, None, np.zeros(lay.words, np.int32))


def test_qwen35_runs_on_the_gpu_unless_its_delta_net_sizes_exceed_the_kernels():
    import dataclasses

    from engine.gpu.hybrid import CONV_MAX_K, RECURRENT_MAX_DK
    from engine.gpu.weights import gpu_refusal

    with open_gguf(DATA / "tiny-qwen35-f32.gguf") as g:
        c = ModelConfig.from_metadata(g.metadata)
    assert c.has_recurrent_state and gpu_refusal(c) is None
    wide = gpu_refusal(dataclasses.replace(c, ssm_k_dim=RECURRENT_MAX_DK + 1))
    long = gpu_refusal(dataclasses.replace(c, ssm_conv_kernel=CONV_MAX_K + 1))
    assert wide and f"{RECURRENT_MAX_DK + 1}" in wide and "runs on the CPU" in wide
    assert long and f"{CONV_MAX_K + 1}" in long and "runs on the CPU" in long


def test_moe_experts_alone_can_need_the_f16_split_scratch():
    """The MoE th tiles (engine.gpu.moe) split their inputs into the tch tile's scratch: a file whose stacked experts
    are K-quants needs it counted even when none of its 2-D matrices is (here the attention is Q8_0), sized for the
    experts' gathered inputs too (th_split_floats)."""
    import dataclasses

    from engine.gguf.types import GGMLType
    from engine.gpu.forward import split_f16_scratch
    from engine.gpu.moe import th_split_floats

    g, c = _open("tiny-qwen3moe-q8_0.gguf")
    with g:
        tensors = list(g.tensors.values())
    as_q4k = [dataclasses.replace(t, ggml_type=GGMLType.Q4_K) if len(t.shape) == 3 else t for t in tensors]
    assert not {t.ggml_type for t in tensors if len(t.shape) == 2} & {GGMLType.Q4_K, GGMLType.Q6_K}
    without = preflight.plan_memory(c, tensors, 8, 16, 512, 4).scratch
    with_experts = preflight.plan_memory(c, as_q4k, 8, 16, 512, 4).scratch
    assert split_f16_scratch(c, 512) >= th_split_floats(c, 512) > 0
    assert with_experts - without >= 4 * split_f16_scratch(c, 512)
