"""Mixture-of-experts pieces on the CPU: routing as the references define it, the expert FFN against a plain
per-token loop, experts kept quantized (views of the map, counted at file size by the memory formula)."""
from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from engine.errors import InvalidModelError
from engine.gguf import open_gguf
from engine.gguf.types import GGMLType
from engine.model import arch
from engine.model.config import ModelConfig
from engine.model.loader import load_model
from engine.model.moe import ExpertStack, MoeWeights, moe_ffn, route, swiglu, swiglu_oai

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
rng = np.random.default_rng(7)


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_routing_is_softmax_then_top_k_renormalised():
    """Qwen3-MoE's definition (softmax over all experts, top k, divide by their sum) and gpt-oss's (softmax
    over the top-k logits) are the same numbers; route() must give them, best expert first."""
    logits = rng.normal(0, 2, (50, 128)).astype(np.float32)
    ids, w = route(logits, 8)
    probs = _softmax(logits.astype(np.float64))
    want_ids = np.argsort(-probs, axis=-1, kind="stable")[:, :8]
    want_w = np.take_along_axis(probs, want_ids, -1)
    want_w /= want_w.sum(-1, keepdims=True)
    assert np.array_equal(ids, want_ids)
    np.testing.assert_allclose(w, want_w, rtol=1e-5, atol=1e-7)
    assert w.dtype == np.float32


def _stack(a: np.ndarray, qt: GGMLType = GGMLType.F32) -> ExpertStack:
    raw = gguf.quants.quantize(a, gguf.GGMLQuantizationType(int(qt))) if qt != GGMLType.F32 else a
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(a.shape[0], -1)
    return ExpertStack(raw, qt, a.shape[1], a.shape[2])


@pytest.mark.parametrize("activation", ["swiglu", "swiglu_oai"])
def test_moe_ffn_equals_a_per_token_loop_over_its_experts(activation):
    n, e, f, k, t = 6, 32, 64, 2, 9
    gate, up = rng.normal(0, 1, (2, n, f, e)).astype(np.float32)
    down = rng.normal(0, 1, (n, e, f)).astype(np.float32)
    biases = [rng.normal(0, 1, s).astype(np.float32) for s in ((n,), (n, f), (n, f), (n, e))]
    mw = MoeWeights(rng.normal(0, 1, (n, e)).astype(np.float32), _stack(gate), _stack(up), _stack(down), *biases)
    h = rng.normal(0, 1, (t, e)).astype(np.float32)
    got = moe_ffn(h, mw, k, activation)
    act = {"swiglu": swiglu, "swiglu_oai": swiglu_oai}[activation]
    for i in range(t):
        probs = _softmax((mw.router @ h[i] + biases[0]).astype(np.float64))
        top = np.argsort(-probs)[:k]
        want = sum(probs[x] / probs[top].sum() * (down[x] @ act(gate[x] @ h[i] + biases[1][x],
                                                                   up[x] @ h[i] + biases[2][x]) + biases[3][x])
                   for x in top)
        np.testing.assert_allclose(got[i], want, rtol=1e-4, atol=1e-4)


def test_the_clamped_swiglu_clamps_gate_above_and_up_both_ways():
    gate = np.array([-2.0, 0.0, 20.0], np.float32)     # no lower clamp on the gate
    up = np.array([-20.0, 0.0, 20.0], np.float32)
    out = swiglu_oai(gate, up)
    sig = 1 / (1 + np.exp(-1.702 * np.array([-2.0, 0.0, 7.0])))
    np.testing.assert_allclose(out, np.array([-2.0, 0.0, 7.0]) * sig * np.array([-6.0, 1.0, 8.0]), rtol=1e-6)


def test_a_quantized_expert_decodes_exactly_as_the_gguf_package_does():
    w = rng.normal(0, 1, (4, 8, 64)).astype(np.float32)
    stack = _stack(w, GGMLType.Q4_0)
    want = gguf.quants.dequantize(gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q4_0),
                                  gguf.GGMLQuantizationType.Q4_0)
    for x in range(4):
        assert np.array_equal(stack.expert(x), want[x])


def test_the_cpu_keeps_experts_in_the_file_type_as_views_of_the_map():
    path = DATA / "tiny-qwen3moe-q8_0.gguf"
    lm = load_model(path)
    c = lm.config
    assert (c.arch, c.n_expert, c.n_expert_used, c.n_ff_exp, c.ffn_kind) == ("qwen3moe", 8, 2, 32, "moe")
    layer = lm.weights.layers[0]
    assert layer.w_gate_up is None and layer.moe is not None
    stack = layer.moe.gate
    assert stack.ggml_type == GGMLType.Q4_0 and stack.raw.shape == (8, 32 * 64 // 32 * 18)
    assert not stack.raw.flags.writeable and not stack.raw.flags.owndata     # the map itself, no copy
    with open_gguf(path) as g:
        tensors = list(g.tensors.values())
    experts = [t for t in tensors if arch.is_expert_tensor(t.name)]
    assert len(experts) == 3 * c.n_layers
    as_float = sum(t.n_elements * 4 for t in tensors)
    cpu = arch.weight_bytes(tensors, "cpu")
    assert cpu <= as_float - sum(t.n_elements * 4 - t.nbytes for t in experts) < as_float
    assert lm.weights.nbytes == cpu                  # what the loader holds is what the formula says
    numpy_path = arch.weight_bytes(tensors, "cpu", kernel_blocks={})      # without compiled kernels
    assert numpy_path == as_float - sum(t.n_elements * 4 - t.nbytes for t in experts)


def _moe_meta(**over):
    meta = {"general.architecture": "qwen3moe", "qwen3moe.block_count": 2, "qwen3moe.embedding_length": 64,
            "qwen3moe.attention.head_count": 4, "qwen3moe.context_length": 256, "qwen3moe.vocab_size": 100,
            "qwen3moe.expert_count": 8, "qwen3moe.expert_used_count": 2,
            "qwen3moe.expert_feed_forward_length": 32}
    meta.update(over)
    return meta


def test_moe_hyperparameters_are_read_and_checked():
    c = ModelConfig.from_metadata(_moe_meta())
    assert (c.n_expert, c.n_expert_used, c.n_ff_exp, c.n_ff) == (8, 2, 32, 32)   # n_ff defaults to the expert's
    names = {s.name for s in arch.layer_tensor_specs(c, 1)}
    assert {"blk.1.ffn_gate_inp.weight", "blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_exps.weight",
            "blk.1.ffn_down_exps.weight"} <= names and "blk.1.ffn_gate.weight" not in names
    with pytest.raises(InvalidModelError, match="expert_used_count"):
        ModelConfig.from_metadata(_moe_meta(**{"qwen3moe.expert_used_count": 9}))
    with pytest.raises(InvalidModelError, match="expert_count"):
        ModelConfig.from_metadata(_moe_meta(**{"qwen3moe.expert_count": None}))
