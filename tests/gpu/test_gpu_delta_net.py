"""The Gated DeltaNet and output-gate kernels (engine/backends/kernels/halo_delta_net.cu, launched as the
forward launches them: engine.gpu.hybrid.enqueue_delta_net) against the CPU float32 reference
(engine.model.delta_net): two sequences per launch over several rounds, one fresh (position 0: zero state)
and one continuing from a stored conv and delta state; short rounds (the recurrent kernel), long ones of
several partial chunks (the chunked kernel), a round mixing both, and decode tokens. Outputs and rolled
states agree with the reference, and the chunked kernel's with the recurrent kernel's on the same inputs;
at Dk = Dv = 24 (the recurrent kernel's last warps of a block own no column), 32 and Qwen3.5-4B's 128. The same
rounds run on the CPU harness (tests/backend/test_simt_kernels_on_cpu.py, the recurrent kernel)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.gpu.hybrid import FILE, enqueue_delta_net
from engine.model.delta_net import gated_delta_net
from tests.gpu.device_arrays import download, upload

pytestmark = pytest.mark.gpu
CFGS = {f"dk{dk}": SimpleNamespace(ssm_k_heads=2, ssm_v_heads=4, ssm_k_dim=dk, ssm_v_dim=dk, ssm_conv_kernel=4,
                                   norm_eps=1e-6, conv_dim=2 * 2 * dk + 4 * dk) for dk in (24, 32, 128)}
# (tokens of sequence 0, of sequence 1), (their start positions): recurrent, chunked, mixed, decode
ROUNDS = [((7, 5), (0, 9)), ((70, 37), (7, 14)), ((1, 20), (77, 51)), ((1, 1), (78, 71))]


class GpuOps:
    """The device side of run_rounds on a backend (tests/backend/test_simt_kernels_on_cpu.py has a CPU-harness
    one): up (a host array onto the device), alloc, launch (as enqueue_delta_net calls it), down, free."""

    def __init__(self, backend):
        self.be, self.stream = backend, backend.create_stream()

    def up(self, a):
        return upload(self.be, self.stream, a)

    def alloc(self, shape):
        return self.be.alloc(shape, np.float32)

    def launch(self, name, grid, block, args):
        self.be.launch(self.be.kernel(FILE, name), grid, block, args, self.stream)

    def down(self, buf, shape):
        return download(self.be, self.stream, buf, shape)

    def free(self, buf):
        self.be.free(buf)


def run_rounds(dev, cfg, chunked: bool, seed: int = 0) -> tuple[list, list, tuple]:
    """Every round through the kernels (on `dev`: GpuOps or the CPU harness's) and through the reference:
    ([got per round], [want per round], (device conv state, reference conv state, device delta state, reference
    delta state))."""
    rng = np.random.default_rng(seed)
    hv, dv, k, C = cfg.ssm_v_heads, cfg.ssm_v_dim, cfg.ssm_conv_kernel, cfg.conv_dim
    lw = SimpleNamespace(conv=rng.normal(0, 0.5, (C, k)).astype(np.float32),
                         dt_bias=rng.normal(0, 0.5, hv).astype(np.float32),
                         ssm_a=-rng.uniform(0.3, 3, hv).astype(np.float32),
                         ssm_norm=rng.uniform(0.5, 1.5, dv).astype(np.float32))
    conv0 = rng.normal(size=(2, k - 1, C)).astype(np.float32)
    delta0 = rng.normal(size=(2, hv, cfg.ssm_k_dim, dv)).astype(np.float32) * 0.1
    conv_d, delta_d = dev.up(conv0), dev.up(delta0)
    w = {n: dev.up(getattr(lw, n)) for n in ("conv", "dt_bias", "ssm_a", "ssm_norm")}
    ref_conv, ref_delta = conv0.copy(), delta0.copy()
    ref_conv[1], ref_delta[1] = 0.0, 0.0                  # slot 1 serves the fresh sequence
    got_all, want_all = [], []
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
        qkv_d, ab_d, z_d = dev.up(qkv), dev.up(ab), dev.up(z)
        meta = [dev.up(x) for x in (qsl, slots, positions)]
        out_d = dev.alloc((T, hv * dv))
        enqueue_delta_net(dev.launch, cfg, T, 2, qkv_d, ab_d, conv_d, delta_d, out_d, w["conv"], w["ssm_a"],
                          w["dt_bias"], meta, chunked)
        dev.launch("halo_gated_norm", (hv, T), -(-dv // 32) * 32, (out_d, z_d, w["ssm_norm"], np.int32(hv),
                                                                   np.int32(dv), np.float32(cfg.norm_eps)))
        got_all.append(dev.down(out_d, (T, hv * dv)))
        want_all.append(want)
        for buf in (qkv_d, ab_d, z_d, out_d, *meta):
            dev.free(buf)
    states = (dev.down(conv_d, conv0.shape), ref_conv, dev.down(delta_d, delta0.shape), ref_delta)
    for buf in (conv_d, delta_d, *w.values()):
        dev.free(buf)
    return got_all, want_all, states


def check_rounds(dev, cfg, forms=(False, True)) -> None:
    """run_rounds in each of `forms` (False: recurrent only; True: chunked for the long sequences) against the
    reference, and both forms against each other."""
    outs = {}
    for chunked in forms:
        got, want, (conv, ref_conv, delta, ref_delta) = run_rounds(dev, cfg, chunked)
        for r, (g, wnt) in enumerate(zip(got, want, strict=True)):
            np.testing.assert_allclose(g, wnt, atol=2e-4, rtol=1e-4, err_msg=f"chunked={chunked} round {r}")
        np.testing.assert_allclose(conv, ref_conv, atol=1e-6)
        np.testing.assert_allclose(delta, ref_delta, atol=2e-4, rtol=1e-4)
        outs[chunked] = got
    if len(outs) < 2:
        return
    for r, (a, b) in enumerate(zip(outs[False], outs[True], strict=True)):
        np.testing.assert_allclose(b, a, atol=2e-4, rtol=1e-4, err_msg=f"chunked vs recurrent, round {r}")
    assert not np.array_equal(outs[False][1], outs[True][1])    # the long round really took another kernel


@pytest.mark.parametrize("cfg", list(CFGS))
def test_delta_net_kernels_match_the_cpu_reference_and_chunked_equals_recurrent(backend, cfg):
    check_rounds(GpuOps(backend), CFGS[cfg])


def test_output_gate_kernel(backend):
    rng = np.random.default_rng(1)
    T, H, D = 5, 4, 32
    attn = rng.normal(size=(T, H * D)).astype(np.float32)
    qg = rng.normal(size=(T, H * 2 * D)).astype(np.float32)
    dev = GpuOps(backend)
    a_d, g_d = dev.up(attn), dev.up(qg)
    dev.launch("halo_output_gate", -(-T * H * D // 256), 256, (a_d, g_d, np.int32(T), np.int32(H), np.int32(D)))
    gate = qg.reshape(T, H, 2 * D)[..., D:].reshape(T, H * D)
    np.testing.assert_allclose(dev.down(a_d, attn.shape), attn / (1 + np.exp(-gate)), atol=1e-6)
