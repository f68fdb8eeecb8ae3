"""Which prefill tile the GPU forward picks and how it splits K (host arithmetic; the kernels themselves are
checked on a GPU in tests/gpu/test_gpu_prefill_tiles.py)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import engine.gpu.forward as fwd_mod
from engine.backends import registry
from engine.backends.base import Kernel
from engine.gguf.types import GGMLType
from engine.gpu.forward import (
    SPLIT_TARGET_BLOCKS,
    TC_K,
    split_k,
    splitk_floats,
    tensor_cores_usable,
    wmma_usable,
)
from engine.gpu.model import GpuModel
from engine.model.step import StepInput

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
BIG = 1 << 30


@pytest.mark.parametrize("api,arch,usable", [("cuda", "sm_90", True), ("cuda", "sm_80", True),
                                             ("cuda", "sm_75", False), ("hip", "gfx1151", False),
                                             ("cpu", "numpy", False), ("cuda", "", False)])
def test_tensor_cores_only_on_cuda_sm80_and_newer(api, arch, usable):
    assert tensor_cores_usable(SimpleNamespace(api=api, arch=arch)) is usable


@pytest.mark.parametrize("api,arch,usable", [("hip", "gfx1151", True), ("hip", "gfx1100:xnack-", True),
                                             ("hip", "gfx1150", True), ("hip", "gfx1201", False),
                                             ("hip", "gfx1030", False), ("cuda", "sm_90", False)])
def test_wmma_tile_only_on_rdna3_and_rdna35(api, arch, usable):
    assert wmma_usable(SimpleNamespace(api=api, arch=arch)) is usable


@pytest.mark.parametrize("T,bq_ok,suffix", [(1, True, "mv_t1"), (3, True, "r1_t4"), (8, True, "r4_t8"),
                                            (9, True, "bq_t16"), (16, True, "bq_t16"), (16, False, "tc"),
                                            (17, True, "tc"), (128, True, "tc")])
def test_batched_decode_kernel_by_token_count(T, bq_ok, suffix, monkeypatch):
    """mv_t1 serves single-token steps, r1_t4 / r4_t8 up to 8 tokens; bq_t16 9..16-token steps of Q4_K / Q6_K matrices (measured
    faster than the prefill tile there); the tensor-core tile takes longer steps; wm replaces gt only when asked."""
    monkeypatch.setattr(fwd_mod, "KQ_BATCH", False)
    monkeypatch.setattr(fwd_mod, "LEGACY_TILES", False)
    fwd = SimpleNamespace(use_tc=True, use_wmma=False)
    assert fwd_mod.GpuForward._tile(fwd, T, True, True, bq_ok)[2] == suffix
    fwd = SimpleNamespace(use_tc=False, use_wmma=True)
    assert fwd_mod.GpuForward._tile(fwd, 64, True, True, False)[2] == "wm"


@pytest.mark.parametrize("T,max_t,rows_div4,bq_ok,suffix", [(1, 1, False, True, "kq_t1"), (3, 1, False, True, "r1_t4"),
                                                            (1, 0, True, True, "kq_t1"), (1, 1, True, False, "kq_t1"),
                                                            (1, 1, True, True, "mv_t1")])
def test_decode_matvec_falls_back_where_mv_does_not_apply(T, max_t, rows_div4, bq_ok, suffix, monkeypatch):
    """mv takes single-token steps of Q4_K / Q6_K rows (bq_ok) in multiples of 4; HALO_GPU_MV_MAX_T=0 turns it off"""
    monkeypatch.setattr(fwd_mod, "MV_MAX_T", max_t)
    monkeypatch.setattr(fwd_mod, "KQ_BATCH", False)
    monkeypatch.setattr(fwd_mod, "LEGACY_TILES", False)
    fwd = SimpleNamespace(use_tc=True, use_wmma=False)
    assert fwd_mod.GpuForward._tile(fwd, T, rows_div4, True, bq_ok)[2] == suffix


@pytest.mark.parametrize("K,kw", [(2560, 1), (4096, 2), (9728, 4), (1024, 1), (8192, 4)])
def test_mv_splits_long_rows_over_more_warps(K, kw):
    # Qwen3-4B: gate/up and qkv (K 2560) one warp, wo (K 4096) two, down (K 9728) four
    assert fwd_mod.mv_split_warps(K) == kw


@pytest.mark.parametrize("rows,K,sms,shape", [
    (6144, 2560, 132, (1, 4)),   # Qwen3-4B q|k|v on an H100 / H200: 768 blocks in two waves at 2 rows, 384 in one at 4
    (2560, 4096, 132, (2, 2)),   # wo: one wave in every form, so the launch of most blocks
    (2560, 9728, 132, (2, 2)),   # down: 1,280 blocks in two waves on 4 warps, 640 in one on 2
    (6144, 2560, 0, (1, 2)),     # multiprocessors unknown (or HIP): mv_split_warps and 2 rows
    (2560, 9728, 0, (4, 2)),
    (6144, 2560, 200, (1, 2)),   # a larger GPU takes 768 blocks in one wave
])
def test_mv_matmul_takes_the_form_of_fewest_waves_then_most_blocks(rows, K, sms, shape, monkeypatch):
    monkeypatch.setattr(fwd_mod, "MV_MATMUL_R", 0)
    assert fwd_mod.mv_matmul_shape(rows, K, sms) == shape


def test_bq_splits_the_few_row_matrices_of_a_16_token_step():
    # Qwen3-4B at 16 tokens: down (2560 rows / 16 = 160 blocks, K 9728 = 38 super-blocks), wo (160, 16), gate/up's
    # 608 blocks stay whole; 16 super-blocks stop at 4 slices of 4; no room for partial sums: no split
    assert fwd_mod.k_slices(160, 38, 16 * 2560, BIG) == 4
    assert fwd_mod.k_slices(160, 16, 16 * 2560, BIG) == 4
    assert fwd_mod.k_slices(5, 38, 16 * 72, BIG) == 8
    assert fwd_mod.k_slices(608, 10, 16 * 9728, BIG) == 1
    assert fwd_mod.k_slices(160, 38, 16 * 2560, 16 * 2560) == 1


def test_split_k_on_qwen3_4b_shapes_at_128_tokens():
    # rows/32 x 2 token tiles: down (2560 rows, K 9728) 160 blocks; wo (2560, K 4096) 160; qkv (6144, K 2560)
    # 384; gate/up (9728 rows, K 2560) 608 blocks
    assert split_k(160, 9728, 128 * 2560, BIG) == 8
    assert split_k(160, 4096, 128 * 2560, BIG) == 8
    assert split_k(384, 2560, 128 * 6144, BIG) == 4
    assert split_k(608, 2560, 2 * 128 * 9728, BIG) == 2
    assert split_k(4748 * 2, 2560, 128 * 151936, BIG) == 1        # the LM head over 128 rows: enough blocks


@pytest.mark.parametrize("base,K", [(1, 9728), (3, 576), (18, 1536), (40, 4096), (7, 2560), (100, 64 * 38)])
def test_split_k_contract(base, K):
    s = split_k(base, K, 1000, BIG)
    kc = K // s
    assert s * kc == K and kc % TC_K == 0             # the kernel's contract: whole 32-k stages per slice
    assert s == 1 or kc >= fwd_mod.SPLIT_MIN_STAGES * TC_K
    assert s == 1 or base * s // 2 < SPLIT_TARGET_BLOCKS
    # never more partial sums than the buffer holds
    assert split_k(base, K, 1000, 1999) == 1 and split_k(base, K, 1000, 2 * 1000 * s) == s


def test_partial_buffer_covers_what_split_k_can_ask_for():
    cfg = SimpleNamespace(q_dim=4096, kv_dim=1024, n_embd=2560, n_ff=9728)
    cap = splitk_floats(cfg, 512)
    for rows, K, planes in ((2560, 9728, 1), (6144, 2560, 1), (9728, 2560, 2), (151936, 2560, 1)):
        for T in (9, 64, 128, 300, 512):
            base = (rows // 32) * -(-T // 64)
            s = split_k(base, K, planes * T * rows, cap)
            assert s == 1 or s * planes * T * rows <= cap
            assert s == split_k(base, K, planes * T * rows, BIG)     # the capacity never limits the split


def test_only_products_worth_a_launch_split(monkeypatch):
    """A split costs a launch and a pass over partial sums: products under SPLIT_MIN_MACS stay whole;
    SmolLM2/gemma-sized 128-token prefill matmuls (a few dozen blocks on their own) split, so does Qwen3.5's
    DeltaNet alpha|beta (64 rows: 4 blocks walking K = 2,560 unsplit), and the Qwen3-4B-sized ones split until the
    grid is full."""
    fwd = SimpleNamespace(partial_cap=BIG)
    splits = lambda rows, T, K, planes=1: fwd_mod.GpuForward._splits(fwd, rows, T, K, planes)  # noqa: E731
    assert splits(64, 16, 256) == 1 and splits(576, 4, 576) == 1 and splits(64, 128, 2560) == 8
    assert splits(576, 128, 1536) == 4 and splits(640, 128, 2048) == 8 and splits(1536, 128, 576, 2) == 2
    assert splits(2560, 128, 4096) == 8 and splits(2560, 128, 9728) == 8


@pytest.mark.parametrize("tile,types,weights,matmul,glu", [
    ("auto", {GGMLType.Q4_K, GGMLType.Q6_K}, 2560 * 4096, "tch", "tch"), ("auto", {GGMLType.Q4_K}, 1 << 23, "tch", "tch"),
    ("auto", {GGMLType.Q4_K, GGMLType.Q8_0}, 1 << 24, "tcp", "tc"), ("auto", {GGMLType.F32}, 1 << 24, "tcp", "tc"),
    ("auto", {GGMLType.Q4_K}, 2048 * 640, "tc", "tc"), ("auto", {GGMLType.Q4_1}, 1536 * 576, "tc", "tc"),
    ("tck", {GGMLType.Q4_K}, 64 * 256, "tck", "tck"), ("tck", {GGMLType.Q8_0}, 64 * 256, "tcp", "tc"),
    ("tch", {GGMLType.Q4_K, GGMLType.Q6_K}, 64 * 256, "tch", "tch"), ("tch", {GGMLType.Q8_0}, 64 * 256, "tcp", "tc"),
    ("tcp", {GGMLType.Q4_K}, 64, "tcp", "tcp"), ("tc", {GGMLType.Q4_K}, 1 << 30, "tc", "tc")])
def test_tensor_core_tile_by_weight_types_and_size(tile, types, weights, matmul, glu, monkeypatch):
    """tch (integer K-quant weights on f16 MMAs; tck, their TF32 tile, when asked for) only where every matrix of
    the product is Q4_K / Q6_K; other matmuls take tcp and other GLUs tc (each measured faster there); by default
    products of a small model's size (gemma-3-270m's largest: 2048 x 640) stay on tc; HALO_GPU_TILES=tch / tck /
    tcp / tc force a tile for comparisons (tch and tck: their types only)."""
    monkeypatch.setattr(fwd_mod, "TC_TILE", tile)
    assert fwd_mod._tc_tile(types, weights) == matmul and fwd_mod._glu_tile(types, weights) == glu


@pytest.mark.parametrize("tile", ["tck", "tch", "tch128"])
def test_prefill_launches_the_tensor_core_tile_with_a_valid_split(tile, monkeypatch):
    """The host side of a tensor-core prefill on the CPU backend (kernels recorded): the Q4_K_M model's products
    take tck (HALO_GPU_TILES=tck: the tiny model's products are under the size where it is the default), every
    tensor-core launch has grid z slices of kc = K / z (a multiple of 32), rows per block as the tile's contract
    asks, and a split launch is followed by its halo_splitk_sum; tch's launches follow their input's halo_split_f16
    (of the same T and K)."""
    monkeypatch.setattr(fwd_mod, "TC_TILE", "tch" if tile == "tch128" else tile)
    monkeypatch.setattr(fwd_mod, "TCH_WIDE_MIN_T", 1 if tile == "tch128" else 1 << 30)
    backend = registry.create("cpu")
    launched = []
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda kernel, grid, block, args, stream, shared_bytes=0: launched.append((kernel.name, grid, args))
    m = GpuModel.load(DATA / "tiny-qwen3-q4_k_m.gguf", backend, max_tokens=32, max_seqs=4, kv_blocks=4)
    kv = m.new_kv_cache(4, 16)
    m.fwd.use_tc = True
    try:
        pos = np.arange(20, dtype=np.int32)
        m.forward(StepInput(token_ids=pos % 7, positions=pos, slot_mapping=pos.astype(np.int64),
                            query_start_loc=np.array([0, 20], np.int32), seq_lens=np.array([20], np.int32),
                            block_tables=np.arange(4, dtype=np.int32)[None, :]), kv)
        names = [n for n, _, _ in launched]
        assert f"halo_matmul_{tile}" in names and f"halo_glu_{tile}" in names and "halo_matmul_gt" not in names
        for i, (name, grid, args) in enumerate(launched):
            if name.endswith(("_tc", "_tcp", "_tck", "_tch", "_tch128")):
                matmul = name.startswith("halo_matmul")
                tch = name.endswith(("_tch", "_tch128"))
                ki = (17, 12) if tch else (15, 9)                       # tch: Xh, Xl, sums, exponents for X (xrow)
                ki = ki[0] if matmul else ki[1]
                K = int(args[ki])
                if tch:                                    # after its input's split, of the same K, T and ls
                    split = launched[i - 1]
                    assert split[0] == "halo_split_f16" and split[1] == int(args[ki + 1])
                    assert [int(a) for a in split[2][2:5]] == [int(a) for a in args[ki:ki + 3]]
                kc = int(args[-2])
                assert grid[2] * kc == K and kc % TC_K == 0
                assert (grid[2] > 1) == (i + 1 < len(launched) and launched[i + 1][0] == "halo_splitk_sum")
                rows = sum(int(args[j]) for j in (2, 6, 10)) if matmul else int(args[6])
                per_block = fwd_mod.TCP_ROWS if matmul and name != "halo_matmul_tc" else fwd_mod.TC_ROWS
                assert grid[0] * per_block == rows
    finally:
        kv.free()
        m.close()


@pytest.mark.parametrize("T,use_tc,tn_ok,suffix", [(2, True, True, "tn_t8"), (8, True, True, "tn_t8"),
                                                   (9, True, True, "tn_t16"), (16, True, True, "tn_t16"),
                                                   (17, True, True, "tc"), (1, True, True, "mv_t1"),
                                                   (4, False, True, "r1_t4"), (12, True, False, "bq_t16")])
def test_tensor_core_batched_decode_where_it_applies(T, use_tc, tn_ok, suffix, monkeypatch):
    """tn_t8 / tn_t16 take 2..16-token steps of Q4_K / Q6_K rows in multiples of 16 where tensor cores exist;
    single-token steps stay on mv_t1 unless HALO_GPU_TN_MIN_T=1; elsewhere the SIMT kernels as before."""
    monkeypatch.setattr(fwd_mod, "KQ_BATCH", False)
    monkeypatch.setattr(fwd_mod, "LEGACY_TILES", False)
    fwd = SimpleNamespace(use_tc=use_tc, use_wmma=False)
    assert fwd_mod.GpuForward._tile(fwd, T, True, True, True, tn_ok)[2] == suffix


@pytest.mark.parametrize("T,chunks", [(1, 64), (2, 32), (3, 16), (4, 16), (8, 8), (16, 4)])
def test_split_kv_launch_keeps_one_tokens_block_count(T, chunks):
    assert fwd_mod.skv_chunks(T) == chunks
    assert chunks >= fwd_mod.SKV_MIN_CHUNKS and T * chunks <= max(fwd_mod.SKV_CHUNKS, T * fwd_mod.SKV_MIN_CHUNKS)


def test_tn_splits_k_until_two_blocks_per_sm():
    # Qwen3-4B at 16 tokens, blocks of TN_WARPS x TN_ROWS = 128 rows: q|k|v (48 blocks, 10 super-blocks) 4 slices,
    # wo (20, 16) 8, down (20, 38) 16, gate/up (76, 10; two planes) 4; slices keep >= 2 super-blocks
    def ts(base, sbs):
        return fwd_mod.k_slices(base, sbs, 16 * 9728 * 2, BIG, fwd_mod.TN_TARGET_BLOCKS, 2)
    assert (ts(48, 10), ts(20, 16), ts(20, 38), ts(76, 10)) == (4, 8, 16, 4)
    assert ts(1, 1) == 1 and ts(1, 4) == 2


@pytest.mark.parametrize("name", ["tiny-gemma3-q4_k_m.gguf", "tiny-llama-q4_1.gguf"])
def test_simt_prefill_attention_only_from_its_minimum_context(name):
    """Where the tensor-core attention tile is not used (HIP; the CPU backend here, kernels recorded), a prefill step
    takes the SIMT tile once its longest sequence reaches ts_min_context keys and halo_attention below it: the same
    10 new tokens in each of two sequences, the longest of them short or reaching the minimum. A sliding-window
    layer whose window is shorter than the minimum (tiny gemma-3's: 8 keys, 5 of 6 layers) keeps halo_attention at
    any length, its full-attention layers take the tile."""
    backend = registry.create("cpu")
    launched = []
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda kernel, grid, block, args, stream, shared_bytes=0: launched.append(kernel.name)
    m = GpuModel.load(DATA / name, backend, max_tokens=32, max_seqs=4, kv_blocks=4)
    assert not m.fwd.flash and m.fwd.ts and m.fwd.ts_min_context == fwd_mod.TS_MIN_CONTEXT > fwd_mod.SKV_MAX_T
    n = m.fwd.ts_min_context
    blocks = -(-n // 16)
    kv = m.new_kv_cache(2 * blocks, 16)
    tables = np.arange(2 * blocks, dtype=np.int32).reshape(2, blocks)

    def attention_kernels(starts: list[int]) -> set[str]:
        launched.clear()
        pos = np.concatenate([np.arange(s, s + 10, dtype=np.int32) for s in starts])
        seq_lens = np.array([s + 10 for s in starts], np.int32)
        slots = np.concatenate([tables[i, p // 16] * 16 + p % 16 for i, p in enumerate(np.split(pos, len(starts)))])
        m.forward(StepInput(token_ids=pos % 7, positions=pos, slot_mapping=slots.astype(np.int64),
                            query_start_loc=np.arange(0, 10 * len(starts) + 1, 10, dtype=np.int32),
                            seq_lens=seq_lens, block_tables=tables[:len(starts)]), kv)
        return [k for k in launched if k.startswith("halo_attention")]

    ts = fwd_mod.ts_kernel(m.config.head_dim, False)
    windowed = [0 < m.fwd.window(i) < n for i in range(m.config.n_layers)]
    long_step = ["halo_attention" if w else ts for w in windowed]          # one attention launch per layer
    try:
        assert attention_kernels([0, 0]) == ["halo_attention"] * len(windowed)
        assert attention_kernels([n - 30, 0]) == ["halo_attention"] * len(windowed)   # longest: n - 20 keys
        assert attention_kernels([n - 10, 0]) == long_step                            # longest: n keys
        assert attention_kernels([0, n - 10]) == long_step
        assert any(windowed) == ("gemma" in name) and not all(windowed)
    finally:
        kv.free()
        m.close()


@pytest.mark.parametrize("T,build", [(17, "tch"), (127, "tch"), (128, "tch128"), (512, "tch128")])
def test_tch_build_by_step_size(T, build):
    """The 128-token tch build from 128 tokens on (H200 run 15: faster at 128 and 512 for every Qwen3-4B product),
    the 64-token one below."""
    assert fwd_mod._tch_build(T) == (build, fwd_mod.TCH_BUILDS[build])


@pytest.mark.parametrize("T,group,n_kv,sms,rows", [(512, 4, 8, 132, 128), (128, 4, 8, 132, 64), (512, 3, 3, 132, 64),
                                                   (2048, 3, 3, 132, 128), (512, 4, 8, 0, 64), (512, 4, 8, 40, 128)])
def test_tiled_attention_goes_wide_where_the_grid_still_fills_the_sms(T, group, n_kv, sms, rows):
    """fa_block_rows: the 128-row block where its grid gives >= 3/4 of the SMs a block (Qwen3-4B shapes' 512-token
    steps on 132 SMs: 128 blocks), else 64 rows (their 128-token steps; SmolLM2's 3 KV heads at 512 tokens); 64
    where the runtime cannot say how many SMs there are."""
    assert fwd_mod.fa_block_rows(T, group, n_kv, sms) == rows



def test_a_prefill_step_splits_its_float32_keys_once_where_the_copy_pays():
    """fwd_mod.split_pays: the splits a step's blocks of queries would repeat (keys x blocks past the first) against
    FA_SPLIT_MIN_REUSE x the keys the copy splits once."""
    assert fwd_mod.FA_SPLIT_MIN_REUSE == 2
    assert fwd_mod.split_pays([2048], [16384], 32)               # a prompt's step: each key split 64 times
    assert not fwd_mod.split_pays([1] * 16, [16384] * 16, 32)    # decode tokens: each key split once anyway
    # a short chunk next to deep decode sequences: copying their keys costs more than the chunk saves
    assert not fwd_mod.split_pays([64] + [1] * 8, [64] + [16384] * 8, 32)
    assert fwd_mod.split_pays([2048] + [1] * 4, [16384] * 5, 32)  # a long chunk next to a few pays
    assert fwd_mod.split_pays([96], [1000], 32) and not fwd_mod.split_pays([64], [1000], 32)   # 3 blocks: even
