"""Kernels that only HIP runs, run from their own source on the CPU (tests/tools/cpu_simt.py). First, the SIMT
prefill attention tile (halo_attention_ts, the prefill attention HIP runs: Strix Halo has no tensor-core
tile of ours) run from its own source on the CPU (tests/tools/cpu_simt.py), against the float64 reference of
tests/gpu/test_gpu_attention.py on the same kind of mixed prefill step: a whole prompt, a chunk deep in another
sequence, and a token of the first sequence after the chunk (a block then holds two sequences, one twice), over
scattered block tables, GQA groups of 1-8, windows, gpt-oss's sinks, heads of 64-256 (96 inside the 128 class),
float32 and f16 caches. halo_attention, which has run on an H200, goes through the same harness first: it holds
the harness itself to the reference.
The same harness runs the CUDA tensor-core kernels on its mma.sync / ldmatrix / cp.async (the PTX ISA's fragment
layouts): the tiled prefill attention (halo_attention_tc, both caches) and the f16 prefill matmul tile (tch, with its
activation split), which have run on an H200, so they hold the harness's instruction layouts to float64 as well.
Second, the RDNA3 / RDNA3.5 WMMA prefill tile (halo_matmul_wm / halo_glu_wm, compiled for gfx1151 with the
harness's v_wmma emulation, the operand layout AMD documents) against float64 at the GPU tile tests' bound, next to
the FMA tile (gt), which has run on the H200, on the same inputs; lanes 16-31 must repeat lanes 0-15's operands."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from engine.gguf.dequant import dequantize
from engine.gguf.types import GGMLType
from engine.gpu.forward import (
    ATTN_WARPS,
    BQ_ROWS,
    MATMUL_WARPS,
    MV_MATMUL_KERNELS,
    MV_R,
    MV_WARPS,
    SKV_WARPS,
    TCH_BUILDS,
    TN_ROWS,
    TN_WARPS,
    TS_ROWS,
    flash_usable,
    kv_suffix,
    merge_threads,
    mv_blocks,
    split_kernel,
    split_sum_stride,
    ts_kernel,
)
from engine.gpu.moe import MOE_TH_TILES, MOE_TILES, MOE_WIDE_NT, max_tiles, wide_tile_rows
from tests.gpu.test_gpu_attention import (
    BS,
    MAGNITUDES,
    magnify,
    owned_tables,
    random_caches,
    reference,
    sink_logits,
    split_step,
    tile_launch,
)
from tests.gpu.test_gpu_delta_net import CFGS as DELTA_CFGS
from tests.gpu.test_gpu_delta_net import check_rounds
from tests.gpu.test_gpu_prefill_tiles import (
    BOUND,
    glu_inputs,
    moe_inputs,
    moe_reference,
    random_matrix,
    silu_glu_reference,
)
from tests.tools import cpu_simt

pytestmark = pytest.mark.skipif(cpu_simt.compiler() is None, reason="no C++ compiler for the CPU kernel harness")
HEAD = ["const float*", "int"]
META = ["const int*", "const int*", "const int*", "int", "int", "int", "int", "int", "float", "int"]


def _cache_args(kv: str) -> list[str]:
    """The C types every attention kernel opens with: q|k|v, the caches of `kv` elements, the step's metadata."""
    return HEAD + [f"const {kv}*", f"const {kv}*"] + META


def _args(kv: str, tiled: bool) -> list[str]:
    return _cache_args(kv) + (["int"] if tiled else []) + ["const float*", "float*"]


@pytest.fixture(scope="module")
def lib():
    names = {}
    for f16, kv in ((False, "float"), (True, "unsigned short")):
        names["halo_attention" + kv_suffix(f16)] = _args(kv, False)
        names["halo_attention_tc" + kv_suffix(f16)] = _args(kv, True)
        for d in TS_ROWS:
            names[ts_kernel(d, f16)] = _args(kv, True)
    names["halo_kv_split"] = ["const float*", "const float*", "const int*", "const int*", "int", "int", "int", "int",
                              "unsigned short*", "unsigned short*", "float4*"]
    names["halo_attention_tc_split"] = _args("unsigned short", True) + ["const float4*"]
    return cpu_simt.build("halo_layer.cu", names, tensor_cores=True)


def mixed_step(rng, H, Hkv, D, f16, prompt, chunk, depth):
    """A `prompt`-token prompt of sequence 1, `chunk` tokens of sequence 0 from position `depth`, then sequence 1's
    next token; caches of random keys and values under scattered block tables."""
    width = -(-(depth + chunk) // BS) + 4
    num_blocks = 2 * width
    tables = owned_tables(rng, 2, width)
    positions = np.concatenate([np.arange(prompt), np.arange(depth, depth + chunk), [prompt + 3]]).astype(np.int32)
    token_seq = np.array([1] * prompt + [0] * chunk + [1], np.int32)
    T = len(positions)
    qkv = rng.normal(size=(T, (H + 2 * Hkv) * D)).astype(np.float32)
    kc, vc, k32, v32 = random_caches(rng, num_blocks * BS, Hkv, D, f16)
    return T, qkv, kc, vc, k32, v32, positions, token_seq, tables


def cache_args(qkv, kc, vc, positions, token_seq, tables, H, Hkv, D, window) -> list:
    """The values of _cache_args' parameters, the scale 1 / sqrt(D)."""
    return [qkv, np.int32(qkv.shape[1]), kc, vc, positions, token_seq, tables, np.int32(tables.shape[1]),
            np.int32(BS), np.int32(H), np.int32(Hkv), np.int32(D), np.float32(1.0 / np.sqrt(D)), np.int32(window)]


def run(lib, name, grid, threads, T, H, Hkv, D, qkv, kc, vc, positions, token_seq, tables, window, sinks, tiled):
    """One attention kernel's output; halo_attention_tc_split after halo_kv_split made its copy of kc / vc."""
    out = np.zeros((T, H * D), np.float32)
    tail = []
    if name == "halo_attention_tc_split":
        sp = split_step(positions, token_seq, len(tables), kc.shape[0], Hkv, D)
        cpu_simt.launch(lib, "halo_kv_split", sp.grid, sp.threads,
                        [kc, vc, sp.seq_lens, tables, np.int32(tables.shape[1]), np.int32(BS), np.int32(Hkv),
                         np.int32(D), sp.k, sp.v, sp.scales])
        kc, vc, tail = sp.k, sp.v, [sp.scales]
    args = cache_args(qkv, kc, vc, positions, token_seq, tables, H, Hkv, D, window)
    cpu_simt.launch(lib, name, grid, threads, args + ([np.int32(T)] if tiled else []) + [sinks, out] + tail)
    return out.reshape(T, H, D)


@pytest.mark.parametrize("f16", [False, True], ids=["f32-cache", "f16-cache"])
def test_the_harness_reproduces_halo_attention(lib, f16):
    H, Hkv, D, window = 8, 2, 64, 0
    rng = np.random.default_rng(7)
    T, qkv, kc, vc, k32, v32, positions, token_seq, tables = mixed_step(rng, H, Hkv, D, f16, 9, 6, 70)
    want = reference(qkv[:, :H * D].reshape(T, H, D), k32, v32, positions, token_seq, tables, 1.0 / np.sqrt(D), window)
    got = run(lib, "halo_attention" + kv_suffix(f16), (T, H), 32 * ATTN_WARPS, T, H, Hkv, D, qkv, kc, vc, positions,
              token_seq, tables, window, None, tiled=False)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("H,Hkv,D,window,sinks", [(8, 2, 128, 0, False), (8, 8, 64, 0, False), (9, 3, 64, 0, False),
                                                   (8, 2, 64, 40, False), (64, 8, 64, 50, True), (4, 1, 256, 30, True),
                                                   (16, 4, 256, 0, False), (4, 1, 96, 0, False)])
@pytest.mark.parametrize("f16", [False, True], ids=["f32-cache", "f16-cache"])
@pytest.mark.parametrize("tile", ["ts", "tc", "tc-wide", "tc-split", "tc-split-wide"])
def test_prefill_attention_tiles_match_float64(lib, H, Hkv, D, window, sinks, f16, tile):
    """ts: the SIMT tile (HIP's); tc: the tensor-core tile (CUDA's, where it fits) in blocks of FA_ROWS[0] rows,
    tc-wide of FA_ROWS[-1]; tc-split(-wide): the float32 cache's on halo_kv_split's copy."""
    if tile != "ts" and not flash_usable(SimpleNamespace(head_dim=D, n_head=H, n_head_kv=Hkv)):
        pytest.skip("halo_attention_tc takes D % 8 == 0, D <= 128")
    if f16 and tile.startswith("tc-split"):
        pytest.skip("the split copy is the float32 cache's")
    rng = np.random.default_rng(H * 7 + D + window)
    T, qkv, kc, vc, k32, v32, positions, token_seq, tables = mixed_step(rng, H, Hkv, D, f16, 21, 45, 90)
    sink = sink_logits(rng, H, sinks)
    want = reference(qkv[:, :H * D].reshape(T, H, D), k32, v32, positions, token_seq, tables, 1.0 / np.sqrt(D), window,
                     sink)
    rows, name, threads = tile_launch(tile, D, f16)
    got = run(lib, name, (-(-T // (rows // (H // Hkv))), Hkv), threads, T, H, Hkv, D, qkv, kc, vc, positions,
              token_seq, tables, window, sink, tiled=True)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("H,Hkv,D", [(8, 2, 128), (4, 1, 96)])
@pytest.mark.parametrize("magnitude", [m for m in MAGNITUDES if m != "unit"])
@pytest.mark.parametrize("tile", ["ts", "tc", "tc-wide", "tc-split"])
def test_prefill_attention_tiles_keep_wide_float32_ranges(lib, H, Hkv, D, magnitude, tile):
    """Float32 keys and values far outside f16's range (2^40 and 2^-40 with the queries scaled back; values 2^-30 and
    2^30): the tc tile's per-tile power-of-two scaling before its f16 head / tail split, and the ts tile as is."""
    rng = np.random.default_rng(D + len(magnitude))
    T, qkv, kc, vc, k32, v32, positions, token_seq, tables = mixed_step(rng, H, Hkv, D, False, 21, 45, 90)
    qkv, kc, vc, vf = magnify(qkv, k32, v32, H, D, magnitude)
    want = reference(qkv[:, :H * D].reshape(T, H, D), kc, vc, positions, token_seq, tables, 1.0 / np.sqrt(D), 0)
    rows, name, threads = tile_launch(tile, D, False)
    got = run(lib, name, (-(-T // (rows // (H // Hkv))), Hkv), threads, T, H, Hkv, D, qkv, kc, vc, positions,
              token_seq, tables, 0, None, tiled=True)
    np.testing.assert_allclose(got, want, atol=2e-5 * vf, rtol=1e-4)


SPLIT_TAIL = ["float*", "int*", "const float*", "float*"]         # partials, counters, sinks, out
MERGE = ["const float*", "int", "int", "int", "const float*", "float*"]
SPLIT_CASES = [(8, 2, 128, 0, False), (2, 2, 64, 0, False), (9, 3, 64, 0, False), (16, 2, 128, 0, False),
               (8, 2, 64, 100, False), (32, 4, 64, 50, True), (4, 1, 256, 0, False), (16, 4, 256, 100, True),
               (4, 1, 96, 0, False)]


@pytest.fixture(scope="module")
def split_lib():
    names = {"halo_attention_merge": MERGE}
    for H, Hkv, D, *_ in SPLIT_CASES:
        for f16, kv in ((False, "float"), (True, "unsigned short")):
            names[split_kernel(D, H // Hkv, f16)[0]] = _cache_args(kv) + SPLIT_TAIL
    return cpu_simt.build("halo_layer.cu", names)


@pytest.mark.parametrize("H,Hkv,D,window,sinks", SPLIT_CASES)
@pytest.mark.parametrize("f16", [False, True], ids=["f32-cache", "f16-cache"])
def test_split_kv_decode_attention_matches_float64(split_lib, H, Hkv, D, window, sinks, f16):
    """The SIMT split-KV builds (HIP's decode attention at every depth; CUDA's for the float32 cache) and the merge,
    separate and fused (the last block of a kv head merges; run twice, its counters back at 0 after each): a decode
    batch of two sequences, one 301 keys deep over 8 chunks (40 keys a chunk: several trips of a warp, the last
    cut short), the other at 38 and 1 keys (most chunks and walkers see no key)."""
    rng = np.random.default_rng(H * 31 + D + window)
    nc, num_blocks = 8, 24
    tables = np.stack([rng.permutation(num_blocks)[:num_blocks - 4] for _ in range(2)]).astype(np.int32)
    positions = np.array([300, 130, 37, 0], np.int32)
    token_seq = np.array([0, 0, 1, 1], np.int32)
    T = len(positions)
    qkv = rng.normal(size=(T, (H + 2 * Hkv) * D)).astype(np.float32)
    kc, vc, k32, v32 = random_caches(rng, num_blocks * BS, Hkv, D, f16)
    sink = sink_logits(rng, H, sinks)
    want = reference(qkv[:, :H * D].reshape(T, H, D), k32, v32, positions, token_seq, tables, 1.0 / np.sqrt(D), window,
                     sink)
    common = cache_args(qkv, kc, vc, positions, token_seq, tables, H, Hkv, D, window)
    name = split_kernel(D, H // Hkv, f16)[0]
    part = np.full(T * H * nc * (D + 2), np.nan, np.float32)
    counters = np.zeros(T * Hkv, np.int32)
    out = np.zeros((T, H * D), np.float32)
    cpu_simt.launch(split_lib, name, (T, Hkv, nc), 32 * SKV_WARPS, common + [part, None, None, None])
    cpu_simt.launch(split_lib, "halo_attention_merge", (T, H), merge_threads(D, nc),
                    [part, np.int32(nc), np.int32(H), np.int32(D), sink, out])
    np.testing.assert_allclose(out.reshape(T, H, D), want, atol=2e-5, rtol=1e-4, err_msg=f"{name} + merge")
    for attempt in ("fused", "fused again"):
        out = np.zeros((T, H * D), np.float32)
        cpu_simt.launch(split_lib, name, (T, Hkv, nc), 32 * SKV_WARPS, common + [part, counters, sink, out])
        assert not counters.any()
        np.testing.assert_allclose(out.reshape(T, H, D), want, atol=2e-5, rtol=1e-4, err_msg=f"{name} {attempt}")


MATMUL = ["const unsigned char*", "int", "int", "int"] * 3 + ["const float*", "const float*", "const int*", "int", "int",
                                                           "float*", "int"]
GLU = ["const unsigned char*", "int", "const unsigned char*", "int", "int", "int", "int", "int", "const float*", "int",
       "int", "float*"]
TILE_ROWS, TILE_TOKENS = 32, 64                       # gt's and wm's block: 32 rows x 64 tokens, 128 threads


def one_matrix(raw, ggml_type, rows: int) -> list:
    """A matmul tile's three segments (w, type, rows, row bytes) holding one matrix: the others empty."""
    t, rb = np.int32(ggml_type), np.int32(raw.shape[1])
    return [raw, t, np.int32(rows), rb, raw, t, np.int32(0), rb, raw, t, np.int32(0), rb]


@pytest.fixture(scope="module")
def quant_lib():
    if cpu_simt.clang() is None:
        pytest.skip("no clang++ for the RDNA code paths")
    names = {f"halo_{kind}_{tile}": args for kind, args in (("matmul", MATMUL), ("glu", GLU)) for tile in ("gt", "wm")}
    return cpu_simt.build("halo_quant.cu", names, arch="gfx1151")


@pytest.mark.parametrize("ggml_type", [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.F32],
                         ids=lambda t: t.name)
def test_wmma_matmul_tile_matches_float64(quant_lib, ggml_type):
    rng = np.random.default_rng(int(ggml_type))
    rows, K, T = 64, 512, 70                           # a partial second token tile
    raw = random_matrix(rng, ggml_type, rows, K)
    W = dequantize(raw.reshape(-1), ggml_type, rows * K).reshape(rows, K).astype(np.float64)
    X = rng.standard_normal((T, K)).astype(np.float32)
    X[3] *= 1e4                                        # one token far larger: the tile's scale must follow it
    want, bound = X.astype(np.float64) @ W.T, np.abs(X).astype(np.float64) @ np.abs(W).T
    before = cpu_simt.wmma_unreplicated(quant_lib)
    for tile in ("gt", "wm"):
        Y = np.full((T, rows), np.nan, np.float32)     # every output must be written
        cpu_simt.launch(quant_lib, f"halo_matmul_{tile}", (rows // TILE_ROWS, -(-T // TILE_TOKENS)), 128,
                        one_matrix(raw, ggml_type, rows) + [None, X, None, np.int32(K), np.int32(T), Y, np.int32(rows)])
        rel = float(np.max(np.abs(Y - want) / bound))
        assert rel < BOUND, f"{tile}: max |Y - Y64| / (|X| |W|) = {rel:.2e}"
    assert cpu_simt.wmma_unreplicated(quant_lib) == before


def test_wmma_glu_tile_matches_float64(quant_lib):
    n_ff, K, T = 64, 512, 100
    tg, tu = GGMLType.Q4_K, GGMLType.Q6_K
    raw_g, raw_u, X, G, U = glu_inputs(np.random.default_rng(11), tg, tu, n_ff, K, T)
    want, scale = silu_glu_reference(X, G, U)
    for tile in ("gt", "wm"):
        A = np.full((T, n_ff), np.nan, np.float32)
        cpu_simt.launch(quant_lib, f"halo_glu_{tile}", (n_ff // TILE_ROWS, -(-T // TILE_TOKENS)), 128,
                        [raw_g, np.int32(tg), raw_u, np.int32(tu), np.int32(raw_g.shape[1]), np.int32(raw_u.shape[1]),
                         np.int32(n_ff), np.int32(0), X, np.int32(K), np.int32(T), A])
        rel = float(np.max(np.abs(A - want) / scale))
        assert rel < BOUND, f"{tile}: max |A - A64| / scale = {rel:.2e}"


SPLIT = ["const float*", "const int*", "int", "int", "int", "unsigned short*", "unsigned short*", "unsigned short*",
         "int*"]
TCH = ["const unsigned char*", "int", "int", "int"] * 3 + ["const float*"] + ["const unsigned short*"] * 3 + [
    "const int*", "int", "int", "int", "float*", "int", "int", "float*"]
TCH_GLU = ["const unsigned char*", "int", "const unsigned char*", "int", "int", "int", "int", "int"] + [
    "const unsigned short*"] * 3 + ["const int*", "int", "int", "int", "float*", "int", "float*"]
TCH_ROWS = 64                                         # tch's block: 64 rows (GLU: 32 gate + 32 up) x 64 tokens


@pytest.fixture(scope="module")
def tc_quant_lib():
    return cpu_simt.build("halo_quant.cu", {"halo_split_f16": SPLIT, "halo_matmul_tch": TCH, "halo_glu_tch": TCH_GLU,
                                            "halo_matmul_tch128": TCH, "halo_glu_tch128": TCH_GLU}, tensor_cores=True)


def split_f16(lib, X, K, xrow=None, unset=0):
    """halo_split_f16 of X's rows (through xrow where given: a row of X per entry, -1 none), as GpuForward._split_f16
    lays out its outputs: heads, tails, sums, exponents, ls. unset: what the sums and exponents hold before the
    launch (a test of what the kernel writes there sets one it cannot write)."""
    T = len(X) if xrow is None else len(xrow)
    ls = split_sum_stride(T)
    xh, xl = np.zeros((T, K), np.uint16), np.zeros((T, K), np.uint16)
    sums, exps = np.full((K // 32) * ls, unset, np.float32), np.full(T, unset, np.int32)
    cpu_simt.launch(lib, "halo_split_f16", (T, 1), 256, [X, xrow, np.int32(K), np.int32(T), np.int32(ls), xh, xl, sums,
                                                          exps])
    return xh, xl, sums, exps, ls


@pytest.mark.parametrize("ggml_type", [GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("K, splits", [(512, 1), (512, 2), (512, 4), (768, 8)])
@pytest.mark.parametrize("build", ["tch", "tch128"])
def test_tensor_core_matmul_tile_matches_float64(tc_quant_lib, ggml_type, K, splits, build):
    """K 768 in 8 slices of 3 stages: slices that start and end inside super-blocks, some holding one stage of a
    super-block (Q4_K's mins and sums of a super-block are written at its first stage and read at its last)."""
    tokens = TCH_BUILDS[build]
    rng = np.random.default_rng(int(ggml_type) + splits)
    rows, T = 128, 70
    raw = random_matrix(rng, ggml_type, rows, K)
    W = dequantize(raw.reshape(-1), ggml_type, rows * K).reshape(rows, K).astype(np.float64)
    X = rng.standard_normal((T, K)).astype(np.float32)
    X[5] *= 300.0
    want, bound = X.astype(np.float64) @ W.T, np.abs(X).astype(np.float64) @ np.abs(W).T
    xh, xl, sums, exps, ls = split_f16(tc_quant_lib, X, K)
    Y = np.full((T, rows), np.nan, np.float32)
    P = np.zeros((splits, T, rows), np.float32)
    cpu_simt.launch(tc_quant_lib, f"halo_matmul_{build}", (rows // TCH_ROWS, -(-T // tokens), splits), 2 * tokens,
                    one_matrix(raw, ggml_type, rows) + [None, xh, xl, sums, exps, np.int32(K), np.int32(T), np.int32(ls),
                                                         Y, np.int32(rows), np.int32(K // splits), P])
    got = Y if splits == 1 else P.sum(axis=0)           # split K: the slices' partial sums (halo_splitk_sum adds them)
    rel = float(np.max(np.abs(got - want) / bound))
    assert rel < BOUND, f"max |Y - Y64| / (|X| |W|) = {rel:.2e}"


@pytest.mark.parametrize("tg, tu", [(GGMLType.Q4_K, GGMLType.Q6_K), (GGMLType.Q6_K, GGMLType.Q4_K),
                                    (GGMLType.Q4_K, GGMLType.Q4_K), (GGMLType.Q6_K, GGMLType.Q6_K)],
                         ids=lambda t: t.name)
@pytest.mark.parametrize("build", ["tch", "tch128"])
def test_tensor_core_glu_tile_matches_float64(tc_quant_lib, build, tg, tu):
    """Every pair of gate / up types: each pair is its own instance of the tile (the rows' types are compile-time)."""
    tokens = TCH_BUILDS[build]
    n_ff, K, T = 64, 512, 100
    raw_g, raw_u, X, G, U = glu_inputs(np.random.default_rng(5), tg, tu, n_ff, K, T)
    want, scale = silu_glu_reference(X, G, U)
    xh, xl, sums, exps, ls = split_f16(tc_quant_lib, X, K)
    A = np.full((T, n_ff), np.nan, np.float32)
    cpu_simt.launch(tc_quant_lib, f"halo_glu_{build}", (n_ff // (TCH_ROWS // 2), -(-T // tokens), 1), 2 * tokens,
                    [raw_g, np.int32(tg), raw_u, np.int32(tu), np.int32(raw_g.shape[1]), np.int32(raw_u.shape[1]),
                     np.int32(n_ff), np.int32(0), xh, xl, sums, exps, np.int32(K), np.int32(T), np.int32(ls), A,
                     np.int32(K), np.zeros(1, np.float32)])
    rel = float(np.max(np.abs(A - want) / scale))
    assert rel < BOUND, f"max |A - A64| / scale = {rel:.2e}"


BQ = ["const unsigned char*", "int", "int", "int"] * 3 + ["const float*", "const float*", "const int*", "int", "int",
                                                         "float*", "int", "int", "float*"]
BQ_GLU = ["const unsigned char*", "int", "const unsigned char*", "int", "int", "int", "int", "int", "const float*", "int",
          "int", "float*"]


@pytest.mark.parametrize("splits", [1, 2])
def test_batched_decode_bq_kernels_match_float64(splits):
    """halo_matmul_bq_t16 / halo_glu_bq_t16, HIP's batched decode of 9..16 tokens (BQ_ROWS rows a block, each
    super-block's activations staged once for the block; the MoE bq tiles share their k loops): 11 tokens (a tile
    part full), Q4_K and Q6_K rows, the matmul's K split over blocks (partial sums, added by halo_splitk_sum)."""
    lib = cpu_simt.build("halo_quant.cu", {"halo_matmul_bq_t16": BQ, "halo_glu_bq_t16": BQ_GLU})
    rng = np.random.default_rng(40 + splits)
    rows, K, T = 32, 768, 11
    for ggml_type in (GGMLType.Q4_K, GGMLType.Q6_K):
        raw = random_matrix(rng, ggml_type, rows, K)
        W = dequantize(raw.reshape(-1), ggml_type, rows * K).reshape(rows, K).astype(np.float64)
        X = rng.standard_normal((T, K)).astype(np.float32)
        want, bound = X.astype(np.float64) @ W.T, np.abs(X).astype(np.float64) @ np.abs(W).T
        Y, P = np.full((T, rows), np.nan, np.float32), np.full((splits, T, rows), np.nan, np.float32)
        ksb = -(-(K // 256) // splits)
        cpu_simt.launch(lib, "halo_matmul_bq_t16", (rows // BQ_ROWS, 1, splits), 32 * MATMUL_WARPS,
                        one_matrix(raw, ggml_type, rows) + [None, X, None, np.int32(K), np.int32(T), Y, np.int32(rows),
                                                             np.int32(ksb), P])
        got = Y if splits == 1 else P.sum(axis=0)
        rel = float(np.max(np.abs(got - want) / bound))
        assert rel < BOUND, f"{ggml_type.name}: max |Y - Y64| / (|X| |W|) = {rel:.2e}"
    raw_g, raw_u, X, G, U = glu_inputs(rng, GGMLType.Q4_K, GGMLType.Q6_K, rows, K, T)
    want, scale = silu_glu_reference(X, G, U)
    A = np.full((T, rows), np.nan, np.float32)
    cpu_simt.launch(lib, "halo_glu_bq_t16", (rows // BQ_ROWS, 1), 32 * MATMUL_WARPS,
                    [raw_g, np.int32(GGMLType.Q4_K), raw_u, np.int32(GGMLType.Q6_K), np.int32(raw_g.shape[1]),
                     np.int32(raw_u.shape[1]), np.int32(rows), np.int32(0), X, np.int32(K), np.int32(T), A])
    rel = float(np.max(np.abs(A - want) / scale))
    assert rel < BOUND, f"glu: max |A - A64| / scale = {rel:.2e}"


MV = ["const unsigned char*", "int", "int", "int"] * 3 + ["const float*", "const float*", "const int*", "int", "int",
                                                         "float*", "int", "int", "int"]
MV_GLU = ["const unsigned char*", "int", "const unsigned char*", "int", "int", "int", "int", "int", "const float*", "int",
          "int", "float*", "int"]


MOE_GLU = ["const unsigned char*", "int", "const unsigned char*", "int", "int", "int", "int", "int", "const float*", "int",
           "const int*", "int", "const float*", "const float*", "float", "float", "float*", "int"]
MOE_DOWN = ["const unsigned char*", "int", "int", "int", "const float*", "int", "const int*", "const float*", "int",
            "const float*", "float*"]


@pytest.fixture(scope="module")
def mv_lib():
    return cpu_simt.build("halo_quant.cu", {"halo_matmul_mv_t1": MV, "halo_matmul_mv4_t1": MV, "halo_glu_mv_t1": MV_GLU,
                                            "halo_matmul_kq_t1": MV[:-2], "halo_moe_glu_mv_t1": MOE_GLU,
                                            "halo_moe_down_mv_t1": MOE_DOWN})


@pytest.mark.parametrize("kw", [1, 2, 4, "kq_t1"])
@pytest.mark.parametrize("rows_per_warp", sorted(MV_MATMUL_KERNELS))
def test_decode_matvec_matches_float64(mv_lib, kw, rows_per_warp):
    """halo_matmul_mv_t1 / halo_matmul_mv4_t1 (2 / 4 rows per warp column), the single-token matvec, over a
    q | k | v-like launch: two Q4_K segments and a Q6_K one (each row's lanes decode their own sub-block scales and
    codes; at 4 rows a warp, the last block half past the rows), K split over kw warps of a block; and
    halo_matmul_kq_t1 (a warp per row: what rows the matvec's contract excludes take), on the same rows."""
    if kw == "kq_t1" and rows_per_warp != MV_R:
        pytest.skip("kq_t1 has no rows-per-warp form")
    rng = np.random.default_rng(40)                    # the same rows for every launch form
    K, counts, types = 1024, (8, 4, 12), (GGMLType.Q4_K, GGMLType.Q4_K, GGMLType.Q6_K)
    segs = list(zip(types, counts, strict=True))
    raws = [random_matrix(rng, t, n, K) for t, n in segs]
    W = np.concatenate([dequantize(r.reshape(-1), t, n * K).reshape(n, K) for r, (t, n) in zip(raws, segs, strict=True)])
    X = rng.standard_normal((1, K)).astype(np.float32)
    bias = rng.standard_normal(sum(counts)).astype(np.float32)
    want = X.astype(np.float64) @ W.astype(np.float64).T + bias
    bound = np.abs(X).astype(np.float64) @ np.abs(W).astype(np.float64).T + np.abs(bias)
    segments = [a for r, (t, n) in zip(raws, segs, strict=True) for a in (r, np.int32(t), np.int32(n), np.int32(r.shape[1]))]
    Y = np.full((1, sum(counts)), np.nan, np.float32)
    args = segments + [bias, X, None, np.int32(K), np.int32(1), Y, np.int32(Y.shape[1])]
    if kw == "kq_t1":
        cpu_simt.launch(mv_lib, "halo_matmul_kq_t1", (-(-sum(counts) // MATMUL_WARPS), 1), 32 * MATMUL_WARPS, args)
    else:
        cpu_simt.launch(mv_lib, MV_MATMUL_KERNELS[rows_per_warp], (mv_blocks(sum(counts), rows_per_warp, kw), 1),
                        32 * MV_WARPS, args + [np.int32(kw), np.int32(1)])
    rel = float(np.max(np.abs(Y - want) / bound))
    assert rel < BOUND, f"max |Y - Y64| / (|X| |W|) = {rel:.2e}"


@pytest.mark.parametrize("tg, tu", [(GGMLType.Q4_K, GGMLType.Q4_K), (GGMLType.Q6_K, GGMLType.Q6_K),
                                    (GGMLType.Q4_K, GGMLType.Q6_K)], ids=lambda t: t.name)
@pytest.mark.parametrize("kw", [1, 4])
def test_decode_glu_matches_float64(mv_lib, tg, tu, kw):
    """halo_glu_mv_t1: gate and up rows of one type in one pass (4 Q6_K rows load a trip at a time, 4 Q4_K rows a
    trip ahead), of two types one after the other."""
    n_ff, K = 24, 1024
    raw_g, raw_u, X, G, U = glu_inputs(np.random.default_rng(50 + kw), tg, tu, n_ff, K, 1)
    want, scale = silu_glu_reference(X, G, U)
    A = np.full((1, n_ff), np.nan, np.float32)
    cpu_simt.launch(mv_lib, "halo_glu_mv_t1", (mv_blocks(n_ff, MV_R, kw), 1), 32 * MV_WARPS,
                    [raw_g, np.int32(tg), raw_u, np.int32(tu), np.int32(raw_g.shape[1]), np.int32(raw_u.shape[1]),
                     np.int32(n_ff), np.int32(0), X, np.int32(K), np.int32(1), A, np.int32(kw)])
    rel = float(np.max(np.abs(A - want) / scale))
    assert rel < BOUND, f"max |A - A64| / scale = {rel:.2e}"


@pytest.mark.parametrize("k,warps,kw,types,biases", [(4, 4, 1, ("Q4_K", "Q6_K"), True), (6, 4, 2, ("Q6_K", "Q4_K"), False),
                                                     (3, 3, 4, ("Q4_K", "Q4_K"), True)])
def test_moe_decode_matvecs_match_float64(mv_lib, k, warps, kw, types, biases):
    """halo_moe_glu_mv_t1 then halo_moe_down_mv_t1, a decode step's expert products, on given ids and weights: each
    pair's gate / up rows found from its expert id in the stacks (biases too), K over kw warps, the down rows of
    every slot weighted and summed, with more slots than the down block's warps (6 over 4: two warps take a second)
    and as many."""
    E, F, n_expert = 512, 768, 8
    tg, td = GGMLType[types[0]], GGMLType[types[1]]
    m = moe_inputs(np.random.default_rng(60 + k), n_expert, k, E, F, tg, td, biases)
    want, scale = moe_reference(m)
    g, u, d = (m["raw"][n] for n in ("gate", "up", "down"))
    A = np.full((k, F), np.nan, np.float32)
    cpu_simt.launch(mv_lib, "halo_moe_glu_mv_t1", (mv_blocks(F, MV_R, kw), k), 32 * MV_WARPS,
                    [g, np.int32(tg), u, np.int32(tg), np.int32(g.shape[1]), np.int32(u.shape[1]), np.int32(F),
                     np.int32(0), m["X"], np.int32(E), m["ids"], np.int32(k), m["bg"], m["bu"], np.float32(0),
                     np.float32(0), A, np.int32(kw)])
    Y = np.full((1, E), np.nan, np.float32)
    cpu_simt.launch(mv_lib, "halo_moe_down_mv_t1", (E // MV_R, 1), 32 * warps,
                    [d, np.int32(td), np.int32(d.shape[1]), np.int32(E), A, np.int32(F), m["ids"], m["w"], np.int32(k),
                     m["bd"], Y])
    rel = float(np.max(np.abs(Y - want) / scale))
    assert rel < 4 * BOUND, f"max |Y - Y64| / scale = {rel:.2e}"


MOE_SORT = ["const int*", "int", "int", "int", "int*", "int*", "int*", "int", "int*", "int"]
MOE_GLU_TN = MOE_GLU[:10] + ["const int*"] * 4 + ["const float*", "const float*", "float", "float", "float*"]
MOE_DOWN_TN = MOE_DOWN[:6] + ["const int*"] * 3 + ["const float*", "float*"]


MOE_SPLIT = ["const unsigned short*", "const unsigned short*", "const unsigned short*", "const int*", "int", "int"]
MOE_GLU_TH = MOE_GLU[:8] + MOE_SPLIT + ["const int*"] * 4 + ["const float*", "const float*", "float", "float", "float*"]
MOE_DOWN_TH = MOE_DOWN[:4] + MOE_SPLIT + ["const int*"] * 3 + ["const float*", "float*"]


@pytest.fixture(scope="module")
def moe_tc_lib():
    kernels = {"halo_moe_sort": MOE_SORT, "halo_moe_combine": ["const float*", "const float*", "int", "int", "int", "float*"],
               "halo_moe_tile_rows": ["const int*"] * 4 + ["int*", "int*"], "halo_split_f16": SPLIT}
    for nt in MOE_TILES:
        for kind in ("tn", "bq"):
            kernels[f"halo_moe_glu_{kind}_t{nt}"], kernels[f"halo_moe_down_{kind}_t{nt}"] = MOE_GLU_TN, MOE_DOWN_TN
    for nt in MOE_TH_TILES:
        kernels[f"halo_moe_glu_th_t{nt}"], kernels[f"halo_moe_down_th_t{nt}"] = MOE_GLU_TH, MOE_DOWN_TH
    for kind in ("tp", "gt"):
        kernels[f"halo_moe_glu_{kind}"], kernels[f"halo_moe_down_{kind}"] = MOE_GLU_TN, MOE_DOWN_TN
    return cpu_simt.build("halo_quant.cu", kernels, tensor_cores=True)


def moe_sorted_tiles(lib, ids: np.ndarray, k: int, n_expert: int, nt: int) -> tuple:
    """halo_moe_sort of a step's expert ids in tiles of nt: (offsets, order, order_tok, tile list, max tiles), the
    tile list checked: each expert's ceil(pairs / nt) tiles in expert order, then -1 up to max_tiles."""
    P = ids.size
    tiles = max_tiles(P, n_expert, nt)
    offsets, order, order_tok = np.zeros(n_expert + 1, np.int32), np.zeros(P, np.int32), np.zeros(P, np.int32)
    tile_list = np.full(2 * tiles, 7777, np.int32)
    cpu_simt.launch(lib, "halo_moe_sort", (1,), 256, [ids, np.int32(P), np.int32(k), np.int32(n_expert), offsets,
                                                      order, order_tok, np.int32(nt), tile_list, np.int32(tiles)])
    counts = np.bincount(ids.reshape(-1), minlength=n_expert)
    used = int(np.sum(-(-counts // nt)))
    assert used < tiles and (tile_list[0:2 * used:2] == np.repeat(np.arange(n_expert), -(-counts // nt))).all()
    assert (tile_list[2 * used::2] == -1).all()
    return offsets, order, order_tok, tile_list, tiles


def moe_tile_step_error(lib, m: dict, types: tuple, k: int, n_expert: int, nt: int, glu: str, down: str, rows: tuple,
                        block: int) -> float:
    """A step's expert products of moe_inputs `m` (experts of `types`: gate / up, down) in tiles of nt:
    halo_moe_sort, then the tile kernels `glu` and
    `down` (a block of `block` threads per (rows[0] | rows[1] expert rows, tile)), each writing its pairs' rows (NaN
    where none did), and halo_moe_combine; the largest |Y - Y64| / scale against moe_reference."""
    want, scale = moe_reference(m)
    g, u, d = (m["raw"][n] for n in ("gate", "up", "down"))
    (T, E), F = m["X"].shape, m["G"].shape[1]
    tg, td = (int(GGMLType[t]) for t in types)
    offsets, order, order_tok, tile_list, tiles = moe_sorted_tiles(lib, m["ids"], k, n_expert, nt)
    A = np.full((T * k, F), np.nan, np.float32)
    cpu_simt.launch(lib, glu, (-(-F // rows[0]), tiles), block,
                    [g, np.int32(tg), u, np.int32(tg), np.int32(g.shape[1]), np.int32(u.shape[1]), np.int32(F),
                     np.int32(0), m["X"], np.int32(E), offsets, order, order_tok, tile_list, m["bg"], m["bu"],
                     np.float32(0), np.float32(0), A])
    D = np.full((T * k, E), np.nan, np.float32)
    cpu_simt.launch(lib, down, (-(-E // rows[1]), tiles), block,
                    [d, np.int32(td), np.int32(d.shape[1]), np.int32(E), A, np.int32(F), offsets, order, tile_list,
                     m["bd"], D])
    Y = np.full((T, E), np.nan, np.float32)
    cpu_simt.launch(lib, "halo_moe_combine", (-(-T * E // 256),), 256, [D, m["w"], np.int32(k), np.int32(T), np.int32(E), Y])
    return float(np.max(np.abs(Y - want) / scale))


@pytest.mark.parametrize("kind", ["tn", "bq"])
@pytest.mark.parametrize("T,k,nt,types,biases", [(5, 3, 8, ("Q4_K", "Q6_K"), True), (24, 4, 16, ("Q6_K", "Q4_K"), False)])
def test_moe_grouped_tile_kernels_match_float64(moe_tc_lib, T, k, nt, types, biases, kind):
    """A step of T tokens' expert products in tiles: halo_moe_sort cuts each expert's pairs into tiles of nt (some
    experts get none, some several), halo_moe_glu_{tn,bq}_tN / halo_moe_down_{tn,bq}_tN (tensor cores: 128 rows a
    block; the SIMT path, HIP's: 16) take a block per (rows, tile) and write each pair's rows, tile entries past the
    last exit, and halo_moe_combine sums a token's slots; against float64 at the tile tests' bound."""
    E, F, n_expert = 512, 768, 6
    m = moe_inputs(np.random.default_rng(70 + T), n_expert, k, E, F, GGMLType[types[0]], GGMLType[types[1]], biases, T)
    rows, warps = (TN_ROWS * TN_WARPS, TN_WARPS) if kind == "tn" else (BQ_ROWS, MATMUL_WARPS)
    rel = moe_tile_step_error(moe_tc_lib, m, types, k, n_expert, nt, f"halo_moe_glu_{kind}_t{nt}",
                              f"halo_moe_down_{kind}_t{nt}", (rows, rows), 32 * warps)
    assert rel < 4 * BOUND, f"max |Y - Y64| / scale = {rel:.2e}"


@pytest.mark.parametrize("kind", ["tp", "gt"])
@pytest.mark.parametrize("T,k,n_expert,types,biases", [(100, 2, 3, ("MXFP4", "MXFP4"), True),
                                                       (40, 3, 5, ("Q8_0", "Q4_0"), False)])
def test_moe_wide_tiles_of_any_type_match_float64(moe_tc_lib, T, k, n_expert, types, biases, kind):
    """Experts the K-quant tiles do not take (gpt-oss's MXFP4, a Q8_0 / Q4_0 file's) on the dense prefill tiles' k
    loops: halo_moe_sort cuts each expert's pairs into tiles of MOE_WIDE_NT (the first case gives most experts two),
    halo_moe_glu_{tp,gt} / halo_moe_down_{tp,gt} (tcp's 3xTF32 loop; gt's FMAs, HIP's) gather the tile's inputs by
    token and by pair and write each pair's rows, tile entries past the last exit; against float64 at the tile
    tests' bound."""
    E, F = 128, 192                      # K % 64 for both products, n_ff % 32, n_embd % 64
    m = moe_inputs(np.random.default_rng(110 + T), n_expert, k, E, F, GGMLType[types[0]], GGMLType[types[1]], biases, T)
    rel = moe_tile_step_error(moe_tc_lib, m, types, k, n_expert, MOE_WIDE_NT, f"halo_moe_glu_{kind}",
                              f"halo_moe_down_{kind}", wide_tile_rows(kind), 128)
    assert rel < 4 * BOUND, f"max |Y - Y64| / scale = {rel:.2e}"


@pytest.mark.parametrize("T,k,n_expert,nt,types,biases", [(70, 2, 4, 32, ("Q4_K", "Q6_K"), True),
                                                         (100, 2, 3, 64, ("Q6_K", "Q4_K"), False)])
def test_moe_th_tiles_match_float64(moe_tc_lib, T, k, n_expert, nt, types, biases):
    """A wide step's expert products on tch's f16 tile: halo_moe_tile_rows lists each tile's tokens and pair ids at
    rows y nt .. (-1 past its pairs); halo_moe_glu_th_tN reads halo_split_f16 of X's T rows through the token list,
    and the split of A's rows in tile order through the pair list (a -1 row: zero sums and exponent) feeds
    halo_moe_down_th_tN (both 64 rows of the tile's expert a block, 2 nt threads), each writing its pairs' rows;
    tiles of 32 and 64 with experts holding one or two (T k / n_expert: 35, 67 pairs)."""
    E, F = 512, 768
    tg, td = GGMLType[types[0]], GGMLType[types[1]]
    m = moe_inputs(np.random.default_rng(90 + T), n_expert, k, E, F, tg, td, biases, T)
    m["X"][3] *= 300.0                                  # one token's own exponent in the split
    want, scale = moe_reference(m)
    g, u, d = (m["raw"][n] for n in ("gate", "up", "down"))
    P = T * k
    offsets, order, order_tok, tile_list, tiles = moe_sorted_tiles(moe_tc_lib, m["ids"], k, n_expert, nt)
    tok, pair = np.full(tiles * nt, 7777, np.int32), np.full(tiles * nt, 7777, np.int32)
    cpu_simt.launch(moe_tc_lib, "halo_moe_tile_rows", (tiles,), nt, [offsets, order, order_tok, tile_list, tok, pair])
    want_pair = np.full((tiles, nt), -1)
    for y in range(tiles):
        e, c0 = tile_list[2 * y], tile_list[2 * y + 1]
        if e >= 0:
            n = min(nt, offsets[e + 1] - c0)
            want_pair[y, :n] = order[c0:c0 + n]
    np.testing.assert_array_equal(pair, want_pair.reshape(-1))
    np.testing.assert_array_equal(tok, np.where(want_pair >= 0, want_pair // k, -1).reshape(-1))

    def split(X, rows_of, K):
        xh, xl, sums, exps, ls = split_f16(moe_tc_lib, X, K, rows_of, unset=99)
        pad = rows_of < 0
        per_token = sums.view(np.uint16).reshape(K // 256, ls, 16)       # [super-block][token]: 8 heads, 8 tails
        assert (exps[pad] == 0).all() and (per_token[:, :len(rows_of)][:, pad] == 0).all()
        return [xh, xl, sums, exps, np.int32(K), np.int32(ls)]

    A = np.full((P, F), np.nan, np.float32)
    cpu_simt.launch(moe_tc_lib, f"halo_moe_glu_th_t{nt}", (F // 32, tiles), 2 * nt,
                    [g, np.int32(tg), u, np.int32(tg), np.int32(g.shape[1]), np.int32(u.shape[1]), np.int32(F),
                     np.int32(0)] + split(m["X"], np.arange(T, dtype=np.int32), E)
                    + [tok, offsets, order, tile_list, m["bg"], m["bu"], np.float32(0), np.float32(0), A])
    D = np.full((P, E), np.nan, np.float32)
    cpu_simt.launch(moe_tc_lib, f"halo_moe_down_th_t{nt}", (E // 64, tiles), 2 * nt,
                    [d, np.int32(td), np.int32(d.shape[1]), np.int32(E)] + split(A, pair, F)
                    + [offsets, order, tile_list, m["bd"], D])
    Y = np.full((T, E), np.nan, np.float32)
    cpu_simt.launch(moe_tc_lib, "halo_moe_combine", (-(-T * E // 256),), 256,
                    [D, m["w"], np.int32(k), np.int32(T), np.int32(E), Y])
    rel = float(np.max(np.abs(Y - want) / scale))
    assert rel < 4 * BOUND, f"max |Y - Y64| / scale = {rel:.2e}"


@pytest.mark.parametrize("K", [2, 4, 8])
def test_conv_silu_matches_the_reference_over_spans(K):
    """halo_conv_silu (Qwen3.5's DeltaNet conv, in place, a thread per channel and span of a sequence's tokens)
    against engine.model.delta_net.causal_conv: sequences of 1 token (7 of 8 spans empty), fewer tokens than the
    window (the last span's window reaches into the stored state), several per span, a fresh sequence at position
    0 (stored state ignored) and continuing ones (stored state read), channels past a block's 32; the state rolled
    forward exactly."""
    from engine.gpu.hybrid import CONV_CHANNELS, CONV_SPANS
    from engine.model.delta_net import causal_conv

    lib = cpu_simt.build("halo_delta_net.cu", {"halo_conv_silu": ["float*", "float*", "const float*", "const int*",
                                                                  "const int*", "const int*", "int", "int"]})
    rng = np.random.default_rng(K)
    C, lens, starts = 70, [1, K - 1 if K > 2 else 2, 37, 130], [5, 9, 0, 40]
    T = sum(lens)
    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    slots = np.array([2, 0, 3, 1], np.int32)
    positions = np.concatenate([np.arange(s, s + n) for s, n in zip(starts, lens, strict=True)]).astype(np.int32)
    qkv = rng.normal(size=(T, C)).astype(np.float32)
    conv = rng.normal(size=(4, K - 1, C)).astype(np.float32)
    weight = rng.normal(0, 0.5, (C, K)).astype(np.float32)
    want, want_state = np.empty_like(qkv), conv.copy()
    for s in range(len(lens)):
        state = np.zeros((K - 1, C), np.float32) if starts[s] == 0 else conv[slots[s]]
        want[qsl[s]:qsl[s + 1]], want_state[slots[s]] = causal_conv(qkv[qsl[s]:qsl[s + 1]], state, weight)
    cpu_simt.launch(lib, "halo_conv_silu", (-(-C // CONV_CHANNELS), len(lens)), CONV_CHANNELS * CONV_SPANS,
                    [qkv, conv, weight, qsl, slots, positions, np.int32(C), np.int32(K)])
    np.testing.assert_allclose(qkv, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(conv, want_state, rtol=0, atol=0)


class HarnessOps:
    """tests/gpu/test_gpu_delta_net.run_rounds's device side on the CPU harness: buffers are numpy arrays, written
    in place by the kernels' own source."""
    SIGNATURES = {
        "halo_conv_silu": ["float*", "float*", "const float*", "const int*", "const int*", "const int*", "int", "int"],
        "halo_delta_prep": ["float*", "float*", "const float*", "const float*", "int", "int", "int", "int", "float"],
        "halo_delta_rule": ["const float*", "const float*", "float*", "float*", "const int*", "const int*",
                            "const int*", "int", "int", "int", "int", "int"],
        "halo_gated_norm": ["float*", "const float*", "const float*", "int", "int", "float"],
    }

    def __init__(self):
        self.lib = cpu_simt.build("halo_delta_net.cu", self.SIGNATURES)

    def up(self, a):
        return np.array(a, copy=True, order="C")

    def alloc(self, shape):
        return np.zeros(shape, np.float32)

    def launch(self, name, grid, block, args):
        cpu_simt.launch(self.lib, name, grid if isinstance(grid, tuple) else (grid,), block, list(args))

    def down(self, buf, shape):
        return buf.reshape(shape).copy()

    def free(self, buf):
        pass


@pytest.mark.parametrize("cfg", list(DELTA_CFGS))
def test_delta_rule_kernels_match_the_reference(cfg):
    """halo_delta_rule (a warp per pair of state columns, rows over lanes, sums by shuffles), with the conv, prep and
    gated norm around it, through the GPU test's rounds (fresh and continuing sequences, prompts, a mixed round,
    decode tokens) against engine.model.delta_net, states included. (The opt-in chunked kernel: on the GPU only;
    its barriers make the harness slow.)"""
    check_rounds(HarnessOps(), DELTA_CFGS[cfg], forms=(False,))
