"""The Gated DeltaNet and output-gate kernels (engine/backends/kernels/halo_delta_net.cu, launched as the
forward launches them: engine.gpu.hybrid.enqueue_delta_net) against the CPU float32 reference
(engine.model.delta_net): two sequences per launch over several rounds, one fresh (position 0: zero state)
and one continuing from a stored conv and delta state; short rounds (the recurrent kernel), long ones of
several partial chunks (the chunked kernel), a round mixing both, and decode tokens. Outputs and rolled
states agree with the reference, and the chunked kernel's with the recurrent kernel's on the same inputs;
at the test model's head sizes and at Qwen3.5-4B's (Dk = Dv = 128)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.gpu.hybrid import FILE, enqueue_delta_net
from engine.model.delta_net import gated_delta_net

pytestmark = pytest.mark.gpu
CFGS = {f"dk{dk}": SimpleNamespace(ssm_k_heads=2, ssm_v_heads=4, ssm_k_dim=dk, ssm_v_dim=dk, ssm_conv_kernel=4,
                                   norm_eps=1e-6, conv_dim=2 * 2 * dk + 4 * dk) for dk in (32, 128)}
# (tokens of sequence 0, of sequence 1), (their start positions): recurrent, chunked, mixed, decode
ROUNDS = [((7, 5), (0, 9)), ((70, 37), (7, 14)), ((1, 20), (77, 51)), ((1, 1), (78, 71))]


def _up(be, stream, a):
    buf = be.alloc(a.shape, a.dtype)
    be.copy_h2d_async(buf, np.ascontiguousarray(a), stream)
    return buf


def _down(be, stream, buf, shape, dtype=np.float32):
    out = be.alloc_pinned(shape, dtype)
    try:
        be.copy_d2h_async(out, buf, stream, nbytes=int(np.prod(shape)) * np.dtype(dtype).itemsize)
        be.synchronize()
        return out.array.copy()
    finally:
        be.free_pinned(out)


def run_rounds(backend, cfg, chunked: bool, seed: int = 0) -> tuple[list, list, tuple]:
    """Every round through the kernels and through the reference: ([got per round], [want per round],
    (device conv state, reference conv state, device delta state, reference delta state))."""
    rng = np.random.default_rng(seed)
    hv, dv, k, C = cfg.ssm_v_heads, cfg.ssm_v_dim, cfg.ssm_conv_kernel, cfg.conv_dim
    lw = SimpleNamespace(conv=rng.normal(0, 0.5, (C, k)).astype(np.float32),
                         dt_bias=rng.normal(0, 0.5, hv).astype(np.float32),
                         ssm_a=-rng.uniform(0.3, 3, hv).astype(np.float32),
                         ssm_norm=rng.uniform(0.5, 1.5, dv).astype(np.float32))
    conv0 = rng.normal(size=(2, k - 1, C)).astype(np.float32)
    delta0 = rng.normal(size=(2, hv, cfg.ssm_k_dim, dv)).astype(np.float32) * 0.1
    stream = backend.create_stream()
    conv_d, delta_d = _up(backend, stream, conv0), _up(backend, stream, delta0)
    w = {n: _up(backend, stream, getattr(lw, n)) for n in ("conv", "dt_bias", "ssm_a", "ssm_norm")}
    ref_conv, ref_delta = conv0.copy(), delta0.copy()
    ref_conv[1], ref_delta[1] = 0.0, 0.0                  # slot 1 serves the fresh sequence
    got_all, want_all = [], []

    def launch(name, grid, block, args):
        backend.launch(backend.kernel(FILE, name), grid, block, args, stream)

    for lens, starts in ROUNDS:
        T = sum(lens)
        qkv = rng.normal(size=(T, C)).astype(np.float32)
        z = rng.normal(size=(T, hv * dv)).astype(np.float32)
        ab = rng.normal(size=(T, 2 * hv)).astype(np.float32)
        qsl = np.array([0, lens[0], T], np.int32)
        slots = np.array([1, 0], np.int32)                # sequence 0 fresh at position 0 (first round)
        positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lens, strict=True)]).astype(np.int32)
        want = np.empty((T, hv * dv), np.float32)
        for s in range(2):
            a, b = qsl[s], qsl[s + 1]
            want[a:b] = gated_delta_net(qkv[a:b], z[a:b], ab[a:b, :hv], ab[a:b, hv:], lw, cfg,
                                        ref_conv[slots[s]], ref_delta[slots[s]])
        qkv_d, ab_d, z_d = _up(backend, stream, qkv), _up(backend, stream, ab), _up(backend, stream, z)
        meta = [_up(backend, stream, x) for x in (qsl, slots, positions)]
        out_d = backend.alloc((T, hv * dv), np.float32)
        enqueue_delta_net(launch, cfg, T, 2, qkv_d, ab_d, conv_d, delta_d, out_d, w["conv"], w["ssm_a"],
                          w["dt_bias"], meta, chunked)
        launch("halo_gated_norm", (hv, T), -(-dv // 32) * 32, (out_d, z_d, w["ssm_norm"], np.int32(hv), np.int32(dv),
                                                               np.float32(cfg.norm_eps)))
        got_all.append(_down(backend, stream, out_d, (T, hv * dv)))
        want_all.append(want)
        for buf in (qkv_d, ab_d, z_d, out_d, *meta):
            backend.free(buf)
    states = (_down(backend, stream, conv_d, conv0.shape), ref_conv, _down(backend, stream, delta_d, delta0.shape),
              ref_delta)
    for buf in (conv_d, delta_d, *w.values()):
        backend.free(buf)
    return got_all, want_all, states


@pytest.mark.parametrize("cfg", list(CFGS))
def test_delta_net_kernels_match_the_cpu_reference_and_chunked_equals_recurrent(backend, cfg):
    outs = {}
    for chunked in (False, True):
        got, want, (conv, ref_conv, delta, ref_delta) = run_rounds(backend, CFGS[cfg], chunked)
        for r, (g, wnt) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(g, wnt, atol=2e-4, rtol=1e-4, err_msg=f"chunked={chunked} round {r}")
        np.testing.assert_allclose(conv, ref_conv, atol=1e-6)
        np.testing.assert_allclose(delta, ref_delta, atol=2e-4, rtol=1e-4)
        outs[chunked] = got
    for r, (a, b) in enumerate(zip(outs[False], outs[True], strict=True)):
        np.testing.assert_allclose(b, a, atol=2e-4, rtol=1e-4, err_msg=f"chunked vs recurrent, round {r}")
    assert not np.array_equal(outs[False][1], outs[True][1])    # the long round really took another kernel


def test_output_gate_kernel(backend):
    rng = np.random.default_rng(1)
    T, H, D = 5, 4, 32
    attn = rng.normal(size=(T, H * D)).astype(np.float32)
    qg = rng.normal(size=(T, H * 2 * D)).astype(np.float32)
    stream = backend.create_stream()
    a_d, g_d = _up(backend, stream, attn), _up(backend, stream, qg)
    backend.launch(backend.kernel(FILE, "halo_output_gate"), -(-T * H * D // 256), 256,
                   (a_d, g_d, np.int32(T), np.int32(H), np.int32(D)), stream)
    gate = qg.reshape(T, H, 2 * D)[..., D:].reshape(T, H * D)
    np.testing.assert_allclose(_down(backend, stream, a_d, attn.shape), attn / (1 + np.exp(-gate)), atol=1e-6)
