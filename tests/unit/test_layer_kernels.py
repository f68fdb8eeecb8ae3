"""The CPU's compiled layer kernels (engine.model.layer_kernels) against engine.model.cpu_forward's numpy
formulas, the reference path, and the decode attention against float64 softmax attention."""
import dataclasses

import numpy as np
import pytest

from engine.model.config import ModelConfig
from engine.model.cpu_forward import Rope, rms_norm
from engine.model.quant_matrix import layer_kernels
from tests.unit.test_model_config import meta

LK = layer_kernels()
pytestmark = pytest.mark.skipif(LK is None, reason="numba is not installed here")


def test_rms_norm_rows_gives_the_numpy_norms_bits():
    """Rows of widths on every branch of numpy's pairwise sum (below 8, up to 128, split once or many times, with
    remainders), values spread over decades, a read-only weight as the loader's."""
    rng = np.random.default_rng(5)
    for cols in (1, 7, 8, 64, 127, 128, 129, 576, 2_563, 9_728):
        x = (rng.normal(size=(3, cols)) * 10.0 ** rng.uniform(-3, 3, size=(3, 1))).astype(np.float32)
        weight = rng.normal(size=cols).astype(np.float32)
        weight.flags.writeable = False
        out = np.empty_like(x)
        LK.rms_norm_rows(x, weight, 1e-6, LK.pairwise_plan(cols), out)
        np.testing.assert_array_equal(out, rms_norm(x, weight, 1e-6), err_msg=f"{cols} columns")


def test_compiled_norm_keeps_the_shape_of_per_head_input():
    """q_norm / k_norm: [T, heads, D] views of a wider row, normed over D."""
    from engine.model.cpu_forward import _compiled_norm

    rng = np.random.default_rng(6)
    qkv = rng.normal(size=(4, 3 * 32)).astype(np.float32)
    q = qkv[:, :64].reshape(4, 2, 32)                       # non-contiguous
    weight = rng.normal(size=32).astype(np.float32)
    got = _compiled_norm(LK)(q, weight, 1e-5)
    assert got.shape == q.shape
    np.testing.assert_array_equal(got, rms_norm(q, weight, 1e-5))


@pytest.mark.parametrize("style,rope_dim", [("neox", 32), ("neox", 16), ("normal", 32), ("normal", 8)])
def test_rope_rows_gives_the_numpy_rotations_bits(style, rope_dim):
    """Both pair layouts, a partial rotation (rope_dim < head size: the rest copied), contiguous input and a
    view of a wider row (q out of q|k|v)."""
    T, heads, D = 5, 3, 32
    config = dataclasses.replace(ModelConfig.from_metadata(meta()), rope_dim=rope_dim, rope_style=style)
    inv_freq = 10000.0 ** (-np.arange(0, rope_dim, 2) / rope_dim)
    reference, compiled = Rope(config, inv_freq), Rope(config, inv_freq, LK.rope_rows)
    cos, sin = reference.tables(np.arange(7, 7 + T))
    rng = np.random.default_rng(7)
    row = rng.normal(size=(T, 2 * heads * D)).astype(np.float32)
    for x in (row[:, : heads * D].reshape(T, heads, D), np.ascontiguousarray(row[:, heads * D:]).reshape(T, heads, D)):
        want = reference.apply(x, cos, sin)
        np.testing.assert_array_equal(compiled.apply(x, cos, sin), want)


@pytest.mark.parametrize("with_sinks", [False, True])
def test_decode_attention_equals_softmax_attention_in_float64(with_sinks):
    """One token over a paged cache: blocks out of order, a context that ends mid-block, a sliding-window
    mask (-inf entries) and grouped KV heads; with and without sink logits."""
    kernel, no_sinks = LK.decode_attention, LK.NO_SINKS
    rng = np.random.default_rng(3)
    H, Hkv, D, bs, L = 8, 2, 16, 4, 11
    k_blocks = rng.normal(size=(6, bs, Hkv, D)).astype(np.float32)
    v_blocks = rng.normal(size=(6, bs, Hkv, D)).astype(np.float32)
    blocks = np.array([4, 0, 5], np.int32)                      # positions 0-3 in block 4, 4-7 in 0, 8-10 in 5
    q = rng.normal(size=(H, D)).astype(np.float32)
    mask = np.where(np.arange(L) > L - 1 - 6, 0.0, -np.inf).astype(np.float32)   # a 6-token window
    sinks = rng.normal(size=H).astype(np.float32) if with_sinks else no_sinks
    scale = 1.0 / np.sqrt(D)
    out = np.empty(H * D, np.float32)
    kernel(q, k_blocks, v_blocks, blocks, mask, sinks, scale, out)

    keys = k_blocks[blocks].reshape(-1, Hkv, D)[:L].astype(np.float64)        # [L, Hkv, D] in position order
    values = v_blocks[blocks].reshape(-1, Hkv, D)[:L].astype(np.float64)
    want = np.empty((H, D))
    for h in range(H):
        g = h // (H // Hkv)
        scores = keys[:, g] @ q[h].astype(np.float64) * scale + mask
        top = max(scores.max(), sinks[h]) if with_sinks else scores.max()
        e = np.exp(scores - top)
        want[h] = e @ values[:, g] / (e.sum() + (np.exp(sinks[h] - top) if with_sinks else 0.0))
    np.testing.assert_allclose(out, want.reshape(-1), rtol=1e-5, atol=1e-6)
