"""The Gated DeltaNet and output-gate kernels (engine/backends/kernels/halo_delta_net.cu) against the CPU
float32 reference (engine.model.delta_net): two sequences in one launch, one fresh (position 0: zero
state) and one continuing from a stored conv and delta state, over several tokens and then one decode
token; the outputs and the rolled states must agree. Not yet wired into the GPU forward pass."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.model.delta_net import gated_delta_net

pytestmark = pytest.mark.gpu
FILE = "halo_delta_net.cu"
CFG = SimpleNamespace(ssm_k_heads=2, ssm_v_heads=4, ssm_k_dim=32, ssm_v_dim=32, ssm_conv_kernel=4, norm_eps=1e-6)
C = 2 * CFG.ssm_k_heads * CFG.ssm_k_dim + CFG.ssm_v_heads * CFG.ssm_v_dim


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


def test_delta_net_kernels_match_the_cpu_reference(backend):
    rng = np.random.default_rng(0)
    hv, dv, k = CFG.ssm_v_heads, CFG.ssm_v_dim, CFG.ssm_conv_kernel
    lw = SimpleNamespace(conv=rng.normal(0, 0.5, (C, k)).astype(np.float32),
                         dt_bias=rng.normal(0, 0.5, hv).astype(np.float32),
                         ssm_a=-rng.uniform(0.3, 3, hv).astype(np.float32),
                         ssm_norm=rng.uniform(0.5, 1.5, dv).astype(np.float32))
    conv0 = rng.normal(size=(2, k - 1, C)).astype(np.float32)
    delta0 = rng.normal(size=(2, hv, CFG.ssm_k_dim, dv)).astype(np.float32) * 0.1
    stream = backend.create_stream()
    conv_d, delta_d = _up(backend, stream, conv0), _up(backend, stream, delta0)
    w = {n: _up(backend, stream, getattr(lw, n)) for n in ("conv", "dt_bias", "ssm_a", "ssm_norm")}
    ref_conv, ref_delta = conv0.copy(), delta0.copy()
    ref_conv[1], ref_delta[1] = 0.0, 0.0                  # slot 1 serves the fresh sequence
    for lens, starts in (((7, 5), (0, 9)), ((1, 1), (7, 14))):
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
            want[a:b] = gated_delta_net(qkv[a:b], z[a:b], ab[a:b, :hv], ab[a:b, hv:], lw, CFG,
                                        ref_conv[slots[s]], ref_delta[slots[s]])
        qkv_d, ab_d, z_d = _up(backend, stream, qkv), _up(backend, stream, ab), _up(backend, stream, z)
        meta = [_up(backend, stream, x) for x in (qsl, slots, positions)]
        out_d = backend.alloc((T, hv * dv), np.float32)
        launch = lambda name, grid, block, args: backend.launch(backend.kernel(FILE, name), grid, block, args, stream)  # noqa: E731
        launch("halo_conv_silu", (-(-C // 128), 2), 128, (qkv_d, conv_d, w["conv"], *meta, np.int32(C), np.int32(k)))
        launch("halo_delta_rule", (hv, 2), dv, (qkv_d, ab_d, delta_d, out_d, w["ssm_a"], w["dt_bias"], *meta,
                                               np.int32(CFG.ssm_k_heads), np.int32(hv), np.int32(CFG.ssm_k_dim),
                                               np.int32(dv), np.float32(CFG.norm_eps)))
        launch("halo_gated_norm", (hv, T), dv, (out_d, z_d, w["ssm_norm"], np.int32(hv), np.int32(dv),
                                                np.float32(CFG.norm_eps)))
        got = _down(backend, stream, out_d, (T, hv * dv))
        np.testing.assert_allclose(got, want, atol=2e-4, rtol=1e-4)
        for buf in (qkv_d, ab_d, z_d, out_d, *meta):
            backend.free(buf)
    np.testing.assert_allclose(_down(backend, stream, conv_d, conv0.shape), ref_conv, atol=1e-6)
    np.testing.assert_allclose(_down(backend, stream, delta_d, delta0.shape), ref_delta, atol=2e-4, rtol=1e-4)


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
