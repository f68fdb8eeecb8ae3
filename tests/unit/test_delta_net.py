"""The Gated DeltaNet pieces: the chunked delta rule (prefill) equals the token-by-token recurrence
(decode) from any starting state and across chunk boundaries; the causal conv's rolling state makes a
split input equal a whole one."""
import numpy as np
import pytest

from engine.model.delta_net import causal_conv, delta_rule_chunked, delta_rule_recurrent, l2_normalize


def _inputs(n, hv=4, dk=8, dv=6, seed=0):
    rng = np.random.default_rng(seed)
    q = l2_normalize(rng.normal(size=(n, hv, dk)).astype(np.float32), 1e-6) * np.float32(dk ** -0.5)
    k = l2_normalize(rng.normal(size=(n, hv, dk)).astype(np.float32), 1e-6)
    v = rng.normal(size=(n, hv, dv)).astype(np.float32)
    g = -rng.uniform(0.01, 2.0, size=(n, hv)).astype(np.float32)
    beta = rng.uniform(0, 1, size=(n, hv)).astype(np.float32)
    state = rng.normal(size=(hv, dk, dv)).astype(np.float32)
    return q, k, v, g, beta, state


@pytest.mark.parametrize("n", [1, 7, 64, 150])
def test_chunked_equals_recurrent(n):
    q, k, v, g, beta, state = _inputs(n)
    s_rec, s_chunk = state.copy(), state.copy()
    o_rec = delta_rule_recurrent(q, k, v, g, beta, s_rec)
    o_chunk = delta_rule_chunked(q, k, v, g, beta, s_chunk)
    np.testing.assert_allclose(o_chunk, o_rec, atol=2e-5, rtol=0)
    np.testing.assert_allclose(s_chunk, s_rec, atol=2e-5, rtol=0)
    assert not np.allclose(s_rec, state)                 # the state did move


def test_small_chunks_equal_one_chunk():
    q, k, v, g, beta, state = _inputs(100, seed=3)
    a, b = state.copy(), state.copy()
    np.testing.assert_allclose(delta_rule_chunked(q, k, v, g, beta, a, chunk=16),
                               delta_rule_chunked(q, k, v, g, beta, b, chunk=64), atol=2e-5, rtol=0)


def test_conv_state_rolls_across_calls():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 6)).astype(np.float32)
    w = rng.normal(size=(6, 4)).astype(np.float32)
    whole, end_state = causal_conv(x, np.zeros((3, 6), np.float32), w)
    first, state = causal_conv(x[:4], np.zeros((3, 6), np.float32), w)
    second, state = causal_conv(x[4:5], state, w)
    third, state = causal_conv(x[5:], state, w)
    np.testing.assert_allclose(np.concatenate([first, second, third]), whole, atol=1e-6)
    np.testing.assert_array_equal(state, end_state)
    np.testing.assert_array_equal(end_state, x[-3:])
