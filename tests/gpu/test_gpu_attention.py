"""The paged attention kernels (engine/backends/kernels/halo_layer.cu) against a float64 reference: the block
per (token, head) kernel and the split-KV pair (halo_attention_split + halo_attention_merge) on the same
cache, with scattered block tables, two sequences at different depths (one past several chunks), GQA
groups of 1, 4 and 8, a sliding window and gpt-oss's attention sinks (a per-head logit in the denominator);
and the tiled prefill kernels (halo_attention_tc on tensor cores, for a float32 cache also on the step's split copy
by halo_kv_split; halo_attention_ts on SIMT FMAs, HIP's) on a
mixed prefill step: a whole 37-token prompt, a 150-token chunk deep in another sequence, and a token of the first
sequence after the chunk (so a block holds two sequences, one of them twice), GQA groups of 1, 3, 4 and 8, sinks
with gpt-oss's 64/8 heads, heads of 64-256. Every kernel also
reads an f16 cache (its _f16 build), against the same float64 reference over the f16-rounded keys and values."""
from __future__ import annotations

from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import pytest

from engine.backends.base import NULL_POINTER
from engine.gpu.forward import (
    ATTN_WARPS,
    FA_KEYS,
    FA_ROWS,
    FA_SPLIT_SHARED_BYTES,
    KV_SPLIT_SCALE_KEYS,
    SKV_CHUNKS,
    SKV_WARPS,
    TS_ROWS,
    flash_usable,
    kv_suffix,
    merge_threads,
    split_kernel,
    split_shared_bytes,
    tensor_cores_usable,
    ts_class,
    ts_kernel,
    ts_usable,
)
from tests.gpu.device_arrays import download, upload

pytestmark = pytest.mark.gpu
FILE = "halo_layer.cu"
BS = 16


def owned_tables(rng, n_seqs: int, width: int) -> np.ndarray:
    """Block tables [n_seqs, width] scattered over n_seqs x width blocks, each block in one row: every slot has one
    owner, as the engine's allocator gives (engine.core.kv_blocks), which halo_kv_split's copy relies on."""
    return rng.permutation(n_seqs * width).reshape(n_seqs, width).astype(np.int32)


def random_caches(rng, slots: int, Hkv: int, D: int, f16: bool):
    """K and V [slots, Hkv, D] as stored (float32 or float16) and as the reference reads them (float32)."""
    kc, vc = (rng.normal(size=(slots, Hkv, D)).astype(np.float16 if f16 else np.float32) for _ in range(2))
    return kc, vc, kc.astype(np.float32), vc.astype(np.float32)


# Value ranges of the float32 cache that an f16 operand cannot hold as they are: keys far outside f16's range with
# queries scaled the other way (the same scores), values likewise. (key factor, value factor)
MAGNITUDES = {"unit": (1.0, 1.0), "huge-k": (2.0 ** 40, 2.0 ** -30), "tiny-k": (2.0 ** -40, 2.0 ** 30)}


def magnify(qkv, k32, v32, H: int, D: int, magnitude: str):
    """The step's queries over the key factor and the float32 caches times theirs (powers of two: the reference's
    scores stay the same), and the value factor (the outputs scale with it)."""
    kf, vf = MAGNITUDES[magnitude]
    q = qkv.copy()
    q[:, :H * D] /= kf
    return q, (k32 * kf).astype(np.float32), (v32 * vf).astype(np.float32), vf


def tile_launch(tile: str, D: int, f16: bool) -> tuple[int, str, int]:
    """(query rows a block, kernel, threads) of a prefill tile: ts (the SIMT tile), tc / tc-wide (the tensor-core
    tile in blocks of FA_ROWS[0] / FA_ROWS[-1] rows, 2 threads a row), tc-split / tc-split-wide (the float32 cache's
    tensor-core tile on halo_kv_split's copy: split_step)."""
    if tile == "ts":
        return TS_ROWS[ts_class(D)], ts_kernel(D, f16), 128
    rows = FA_ROWS[-1] if tile.endswith("-wide") else FA_ROWS[0]
    return rows, ("halo_attention_tc_split" if tile.startswith("tc-split") else "halo_attention_tc" + kv_suffix(f16)), \
        2 * rows


class SplitStep(NamedTuple):
    """halo_kv_split's arrays for a step over a cache of `slots` slots (GpuKVCache's split copy, zeroed) and its
    launch: each sequence's keys (its last position + 1, as the step metadata's seq_lens), the K and V copies
    (f16 heads and tails), the tiles' factors; grid (tiles of the longest sequence, sequences, kv heads)."""
    seq_lens: np.ndarray
    k: np.ndarray
    v: np.ndarray
    scales: np.ndarray
    grid: tuple[int, int, int]
    threads: int = 128
    shared: int = FA_SPLIT_SHARED_BYTES        # the attention's, after it


def split_step(positions, token_seq, n_seqs: int, slots: int, Hkv: int, D: int) -> SplitStep:
    seq_lens = np.array([positions[token_seq == s].max() + 1 if (token_seq == s).any() else 0
                         for s in range(n_seqs)], np.int32)
    k, v = (np.zeros(2 * slots * Hkv * D, np.uint16) for _ in range(2))
    scales = np.zeros(slots // KV_SPLIT_SCALE_KEYS * Hkv * 4, np.float32)
    return SplitStep(seq_lens, k, v, scales, (-(-int(seq_lens.max()) // FA_KEYS), n_seqs, Hkv))


def reference(q, kc, vc, positions, token_seq, tables, scale, window, sinks=None):
    """q [T, H, D]; caches [slots, Hkv, D]; float64 softmax(scale q.K^T) V over the allowed keys; sinks [H]
    join the softmax's denominator only."""
    T, H, D = q.shape
    G = H // kc.shape[1]
    out = np.empty((T, H, D))
    for t in range(T):
        pos, table = positions[t], tables[token_seq[t]]
        lo = max(0, pos - window + 1) if window > 0 else 0
        js = np.arange(lo, pos + 1)
        slots = table[js // BS] * BS + js % BS
        for h in range(H):
            k, v = kc[slots, h // G].astype(np.float64), vc[slots, h // G].astype(np.float64)
            s = scale * (k @ q[t, h].astype(np.float64))
            top = s.max() if sinks is None else max(s.max(), float(sinks[h]))
            p = np.exp(s - top)
            out[t, h] = p @ v / (p.sum() + (0.0 if sinks is None else np.exp(float(sinks[h]) - top)))
    return out


def sink_logits(rng, H: int, on: bool):
    """Sinks around the scores' scale (|s| ~ 1-3): some heads' sink dominates, some barely counts."""
    return rng.normal(scale=2.0, size=H).astype(np.float32) if on else None


def _up_sinks(backend, stream, sinks, bufs):
    if sinks is None:
        return NULL_POINTER
    bufs.append(upload(backend, stream, sinks))
    return bufs[-1]


@pytest.mark.parametrize("H,Hkv,D,window,sinks", [(8, 2, 128, 0, False), (8, 8, 64, 0, False), (16, 2, 128, 0, False),
                                                   (8, 2, 64, 100, False), (64, 8, 64, 128, True), (16, 8, 64, 0, True),
                                                   (4, 1, 256, 0, False), (16, 4, 256, 100, True)])
@pytest.mark.parametrize("f16", [False, True], ids=["f32-cache", "f16-cache"])
def test_attention_kernels_match_float64(backend, H, Hkv, D, window, sinks, f16):
    rng = np.random.default_rng(H * 1000 + D + window)
    num_blocks = 80                                       # 1280 positions
    depths = [1100, 37]       # keys per chunk: sequence 0 ceil(1101 / 64) -> 20 (56 chunks), sequence 1 the 16 minimum
    tables = np.stack([rng.permutation(num_blocks)[:num_blocks - 8] for _ in range(2)])
    tables[1] = np.roll(tables[0], 7)                     # both tables valid; distinct slot orders
    tables = tables.astype(np.int32)
    # tokens: three of sequence 0 (a decode batch row and two earlier positions) and two of sequence 1
    positions = np.array([depths[0], depths[0] - 1, 130, depths[1], 0], np.int32)
    token_seq = np.array([0, 0, 0, 1, 1], np.int32)
    T = len(positions)
    ld = (H + 2 * Hkv) * D
    qkv = rng.normal(size=(T, ld)).astype(np.float32)
    kc, vc, k32, v32 = random_caches(rng, num_blocks * BS, Hkv, D, f16)
    scale = 1.0 / np.sqrt(D)
    sink = sink_logits(rng, H, sinks)
    want = reference(qkv[:, :H * D].reshape(T, H, D), k32, v32, positions, token_seq, tables, scale, window, sink)
    stream = backend.create_stream()
    bufs = [upload(backend, stream, a) for a in (qkv, kc, vc, positions, token_seq, tables)]
    qkv_d, kc_d, vc_d, pos_d, seq_d, tab_d = bufs
    sink_d = _up_sinks(backend, stream, sink, bufs)
    part = backend.alloc(T * H * SKV_CHUNKS * (D + 2), np.float32)
    outs = [backend.alloc((T, H * D), np.float32) for _ in range(4)]
    counters = backend.alloc(T * Hkv, np.int32)
    backend.memset_async(counters, 0, stream)
    common = (qkv_d, np.int32(ld), kc_d, vc_d, pos_d, seq_d, tab_d, np.int32(tables.shape[1]), np.int32(BS),
              np.int32(H), np.int32(Hkv), np.int32(D), np.float32(scale), np.int32(window))
    try:
        launch = lambda name, grid, block, args, shared=0: backend.launch(  # noqa: E731
            backend.kernel(FILE, name), grid, block, args, stream, shared)
        launch("halo_attention" + kv_suffix(f16), (T, H), 32 * ATTN_WARPS, common + (sink_d, outs[0]),
               4 * ATTN_WARPS * (D + 2))
        got = {"halo_attention": download(backend, stream, outs[0], (T, H * D))}
        # the SIMT build, and the tensor-core build where the device and the cache have one (split_kernel)
        for tc in sorted({False, tensor_cores_usable(backend)}):
            shared = split_shared_bytes(D, H // Hkv, f16, tc)
            split = split_kernel(D, H // Hkv, f16, tc)[0]
            launch(split, (T, Hkv, SKV_CHUNKS), 32 * SKV_WARPS,
                   common + (part, NULL_POINTER, NULL_POINTER, NULL_POINTER), shared)
            launch("halo_attention_merge", (T, H), merge_threads(D, SKV_CHUNKS),
                   (part, np.int32(SKV_CHUNKS), np.int32(H), np.int32(D), sink_d, outs[1]))
            for out in outs[2:]:        # the fused merge, twice: its counters must be back at 0 after a step
                launch(split, (T, Hkv, SKV_CHUNKS), 32 * SKV_WARPS, common + (part, counters, sink_d, out), shared)
            assert not download(backend, stream, counters, (T * Hkv,)).any()
            for i, out in enumerate(outs[1:]):
                got[f"{split} {('merge', 'fused', 'fused again')[i]}"] = download(backend, stream, out, (T, H * D))
        for name, out in got.items():
            np.testing.assert_allclose(out.reshape(T, H, D), want, atol=2e-5, rtol=1e-4, err_msg=name)
    finally:
        for b in bufs + outs + [part, counters]:
            backend.free(b)
        backend.destroy_stream(stream)


@pytest.mark.parametrize("H,Hkv,D,window,sinks", [(8, 2, 128, 0, False), (8, 8, 64, 0, False), (16, 2, 128, 0, False),
                                                   (9, 3, 64, 0, False), (8, 2, 64, 100, False), (4, 1, 128, 60, False),
                                                   (64, 8, 64, 128, True), (4, 1, 256, 60, True), (16, 4, 256, 0, False),
                                                   (4, 1, 96, 0, False)])
@pytest.mark.parametrize("f16", [False, True], ids=["f32-cache", "f16-cache"])
@pytest.mark.parametrize("tile", ["tc", "tc-wide", "tc-split", "tc-split-wide", "ts"])
@pytest.mark.parametrize("magnitude", list(MAGNITUDES))
def test_tiled_prefill_attention_matches_float64(backend, H, Hkv, D, window, sinks, f16, tile, magnitude):
    """tc / tc-wide: the tensor-core tile (CUDA sm_80+, D % 8 == 0, D <= 128) in blocks of FA_ROWS[0] / FA_ROWS[-1]
    query rows; tc-split(-wide): the float32 cache's on the step's split copy (halo_kv_split first); ts: the SIMT
    tile HIP runs (any GPU; its head-size classes 64 / 128 / 256, D = 96 inside the 128 class). The float32 cache
    also with keys and values far outside f16's range (the tc tiles split them into f16 heads and tails after a
    power-of-two scaling)."""
    if f16 and magnitude != "unit":
        pytest.skip("an f16 cache holds f16 values")
    if f16 and tile.startswith("tc-split"):
        pytest.skip("the split copy is the float32 cache's")
    config = SimpleNamespace(head_dim=D, n_head=H, n_head_kv=Hkv)
    if tile != "ts" and not (tensor_cores_usable(backend) and flash_usable(config)):
        pytest.skip("halo_attention_tc needs CUDA tensor cores (sm_80+) and D % 8 == 0, D <= 128")
    assert tile != "ts" or ts_usable(config)
    rng = np.random.default_rng(H * 7 + D + window)
    num_blocks = 144                             # 2 rows of 72 blocks: sequence 0 reaches key 999
    tables = owned_tables(rng, 2, num_blocks // 2)
    positions = np.concatenate([np.arange(37), np.arange(850, 1000), [40]]).astype(np.int32)
    token_seq = np.array([1] * 37 + [0] * 150 + [1], np.int32)
    T = len(positions)
    ld = (H + 2 * Hkv) * D
    qkv = rng.normal(size=(T, ld)).astype(np.float32)
    kc, vc, k32, v32 = random_caches(rng, num_blocks * BS, Hkv, D, f16)
    vf = 1.0
    if magnitude != "unit":
        qkv, kc, vc, vf = magnify(qkv, k32, v32, H, D, magnitude)
        k32, v32 = kc, vc
    scale = 1.0 / np.sqrt(D)
    sink = sink_logits(rng, H, sinks)
    want = reference(qkv[:, :H * D].reshape(T, H, D), k32, v32, positions, token_seq, tables, scale, window, sink)
    stream = backend.create_stream()
    bufs = [upload(backend, stream, a) for a in (qkv, kc, vc, positions, token_seq, tables)]
    qkv_d, kc_d, vc_d, pos_d, seq_d, tab_d = bufs
    sink_d = _up_sinks(backend, stream, sink, bufs)
    out = backend.alloc((T, H * D), np.float32)
    try:
        rows, name, threads = tile_launch(tile, D, f16)
        tokens_per_block = rows // (H // Hkv)
        tail, shared = (), 0
        if tile.startswith("tc-split"):              # the caches' split copy first, as the forward does
            sp = split_step(positions, token_seq, len(tables), num_blocks * BS, Hkv, D)
            lens_d, ks_d, vs_d, scales_d = (upload(backend, stream, a) for a in (sp.seq_lens, sp.k, sp.v, sp.scales))
            bufs += [lens_d, ks_d, vs_d, scales_d]
            backend.launch(backend.kernel(FILE, "halo_kv_split"), sp.grid, sp.threads,
                           (kc_d, vc_d, lens_d, tab_d, np.int32(tables.shape[1]), np.int32(BS), np.int32(Hkv),
                            np.int32(D), ks_d, vs_d, scales_d), stream)
            kc_d, vc_d = ks_d, vs_d                  # the attention reads the copies
            tail, shared = (scales_d,), sp.shared
        backend.launch(backend.kernel(FILE, name), (-(-T // tokens_per_block), Hkv), threads,
                       (qkv_d, np.int32(ld), kc_d, vc_d, pos_d, seq_d, tab_d, np.int32(tables.shape[1]),
                        np.int32(BS), np.int32(H), np.int32(Hkv), np.int32(D), np.float32(scale), np.int32(window),
                        np.int32(T), sink_d, out) + tail, stream, shared)
        got = download(backend, stream, out, (T, H * D)).reshape(T, H, D)
        np.testing.assert_allclose(got, want, atol=2e-5 * vf, rtol=1e-4)
    finally:
        for b in bufs + [out]:
            backend.free(b)
        backend.destroy_stream(stream)
