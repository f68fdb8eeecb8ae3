"""The launch arguments GpuForward keeps from step to step (engine.gpu.forward.Matrices, GpuForward.layer_args): the
host side of real steps on the CPU backend, kernels recorded instead of run."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.backends import registry
from engine.backends.base import NULL_POINTER, DeviceBuffer, Kernel
from engine.gpu.forward import Matrices
from engine.gpu.model import GpuModel
from engine.model.step import StepInput

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"


def _step(ids: np.ndarray, start: int) -> StepInput:
    """One sequence's step of tokens `ids` from position `start`, over blocks 0-3."""
    pos = np.arange(start, start + len(ids), dtype=np.int32)
    return StepInput(token_ids=ids.astype(np.int32), positions=pos, slot_mapping=pos.astype(np.int64),
                     query_start_loc=np.array([0, len(ids)], np.int32), seq_lens=np.array([start + len(ids)], np.int32),
                     block_tables=np.arange(4, dtype=np.int32)[None, :])


def _prefill(T: int) -> StepInput:
    return _step(np.arange(T) % 7, 0)


@pytest.fixture()
def recorded():
    backend = registry.create("cpu")
    launched = []
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda kernel, grid, block, args, stream, shared_bytes=0: launched.append((kernel.name, args))
    m = GpuModel.load(DATA / "tiny-qwen3-q4_k_m.gguf", backend, max_tokens=32, max_seqs=4, kv_blocks=8)
    yield m, launched
    m.close()


def test_matrices_hold_each_segments_arguments_and_pad_to_three(recorded):
    m, _ = recorded
    L = m.fwd.w.layers[0]
    qkv = Matrices.of((L.wq, L.wk, L.wv))
    assert qkv.rows == L.wq.rows + L.wk.rows + L.wv.rows and qkv.K == L.wq.cols == int(qkv.K32)
    assert qkv.segments[4:8] == (L.wk.buf, L.wk.ggml_type, L.wk.rows, L.wk.row_bytes)
    assert all(type(a) is np.int32 for a in qkv.segments[9:12])          # widths explicit: int32 each
    wo = Matrices.of((L.wo,))
    assert wo.segments[0] is L.wo.buf and wo.segments[4:] == (NULL_POINTER, 0, 0, 0, NULL_POINTER, 0, 0, 0)
    assert m.fwd.matrices([L.wo]) is m.fwd.matrices((L.wo,))            # made once, then kept


def test_each_kv_cache_gets_its_own_layer_arguments(recorded):
    """A step with a second cache writes and reads that cache, never the first one's buffers."""
    m, launched = recorded
    first, second = m.new_kv_cache(4, 16), m.new_kv_cache(4, 16)
    try:
        for kv in (first, second, first):
            launched.clear()
            m.forward(_prefill(20), kv)
            ropes = [args for name, args in launched if name.startswith("halo_rope_kv")]
            attn = [args for name, args in launched if name.startswith("halo_attention")]
            assert len(ropes) == len(attn) == m.config.n_layers
            for i, (rope, att) in enumerate(zip(ropes, attn, strict=True)):
                assert rope[-2] is kv.k[i] and rope[-1] is kv.v[i] and rope[2] is kv.positions
                assert att[2] is kv.k[i] and att[3] is kv.v[i] and att[6] is kv.block_tables
            other = second if kv is first else first
            theirs = {id(b) for b in (other.positions, other.slots, other.block_tables, *other.k, *other.v)}
            assert not any(isinstance(a, DeviceBuffer) and id(a) in theirs for _, args in launched for a in args)
    finally:
        first.free()
        second.free()


def test_only_the_down_projections_skip_the_rows_prefetch(recorded):
    """A decode step's single-token matvecs (halo_matmul_mv_t1, last argument `prefetch`): the launch right after
    each GLU (the down projection, whose blocks cannot start before the GLU's leave) skips its rows' L2 prefetch;
    q|k|v and wo, behind a norm or the attention, keep theirs."""
    m, launched = recorded
    kv = m.new_kv_cache(4, 16)
    try:
        m.forward(_step(np.array([3]), 5), kv)
        names = [name for name, _ in launched]
        mv = [(i, int(args[-1])) for i, (name, args) in enumerate(launched) if name == "halo_matmul_mv_t1"]
        after_glu = {i for i, _ in mv if names[i - 1].startswith("halo_glu_")}
        assert len(after_glu) == m.config.n_layers
        assert [p for i, p in mv if i in after_glu] == [0] * m.config.n_layers
        assert [p for i, p in mv if i not in after_glu] == [1] * (len(mv) - m.config.n_layers)
        assert len(mv) - m.config.n_layers == 2 * m.config.n_layers   # q|k|v, wo (the LM head's 355 rows: kq_t1)
    finally:
        kv.free()
