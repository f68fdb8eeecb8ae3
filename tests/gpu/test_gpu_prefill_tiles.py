"""The prefill matmul tiles on their own, against float64 on the host: random weights in every quant type
(GGUF block bytes with sane scales, dequantized by engine.gguf as the reference), token counts that leave
partial tiles, and K long enough that the tensor-core tiles (tch / tck / tcp, the pipelined ones, and tc) split K
(partial sums + halo_splitk_sum; forced for K = 2560, matmul and GLU, which is below the size the forward splits
at; that matmul case also gathers its rows through xrow) or run one block over all of K (K = 1536).

Precision: the tensor-core tiles split each operand into two TF32 parts (3xTF32; tck: the activations only, the
weights' integer codes are exact; tch: the activations into f16 heads and tails per token scale), so its error must
stay at float32 level: max |Y - Y64| / (|X| |W|^T) below 2e-6, which a single TF32 product (~1e-5 at these K) would
fail. The SIMT tile (gt, what HIP runs) is held to the same bound, so is the RDNA WMMA tile (wm, 3xF16 with
power-of-two tile scaling) on a gfx11 GPU (none has run it yet), and so are the batched-decode kernels
(tn_tN on tensor cores and bq_t16 for Q4_K / Q6_K, kq_tN behind HALO_GPU_KQ_BATCH=1).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

import engine.gpu.forward as fwd_mod
from engine.backends import registry
from engine.gguf.dequant import dequantize
from engine.gguf.types import BLOCK_LAYOUT, GGMLType
from engine.gpu.model import GpuModel
from engine.gpu.weights import DeviceMatrix
from tests.gpu import device_arrays

pytestmark = pytest.mark.gpu
TINY = Path(__file__).resolve().parents[2] / "tests" / "golden" / "data" / "tiny-llama-f32.gguf"
# byte offsets of the float16 scale fields in each block type (everything else random)
F16_FIELDS = {GGMLType.Q4_0: (0,), GGMLType.Q4_1: (0, 2), GGMLType.Q5_0: (0,), GGMLType.Q5_1: (0, 2),
              GGMLType.Q8_0: (0,), GGMLType.Q4_K: (0, 2), GGMLType.Q5_K: (0, 2), GGMLType.Q6_K: (208,)}
TYPES = [GGMLType.Q4_K, GGMLType.Q6_K, GGMLType.Q5_K, GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.F16,
         GGMLType.F32, GGMLType.MXFP4]
BOUND = 2e-6


def random_matrix(rng, ggml_type: GGMLType, rows: int, K: int) -> np.ndarray:
    """[rows, row_bytes] uint8 of valid blocks: random quants, float16 scales in [0.002, 0.02) (MXFP4: e8m0
    exponents for scales 2^-10 .. 2^-2)."""
    if ggml_type == GGMLType.F32:
        return rng.standard_normal((rows, K)).astype(np.float32).view(np.uint8)
    if ggml_type == GGMLType.F16:
        return rng.standard_normal((rows, K)).astype(np.float16).view(np.uint8)
    elems, nbytes = BLOCK_LAYOUT[ggml_type]
    blocks = rng.integers(0, 256, size=(rows * K // elems, nbytes), dtype=np.uint8)
    if ggml_type == GGMLType.MXFP4:
        blocks[:, 0] = rng.integers(118, 127, size=len(blocks))
    for off in F16_FIELDS.get(ggml_type, ()):
        scales = rng.uniform(0.002, 0.02, size=len(blocks)).astype(np.float16)
        blocks[:, off:off + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(rows, -1)


@pytest.fixture(scope="module")
def fwd(gpu_name):
    backend = registry.create(gpu_name)
    model = GpuModel.load(TINY, backend, max_tokens=128, max_seqs=4, kv_blocks=4)
    yield model.fwd
    model.close()
    backend.close()


def modes(fwd, types=()):
    """The prefill tiles this device runs for matrices of these types: tch, tck, tcp and tc (CUDA tensor cores: the
    integer K-quant weights on f16 MMAs with the activations split once by halo_split_f16, the default for Q4_K /
    Q6_K, 64 tokens per block (tch) or 128 (tch128, steps of TCH_WIDE_MIN_T or more); the same on TF32 MMAs, HALO_GPU_TILES=tck; the pipelined tile, the matmul
    default for other types, HALO_GPU_TILES=tcp; the first one, HALO_GPU_TILES=tc), wm (RDNA3 / 3.5 WMMA,
    opt-in in the engine, tested wherever the arch has it), gt (FMAs, everywhere)."""
    tck = ["tch", "tch128", "tck"] if set(types) <= fwd_mod.TCK_TYPES else []
    return (tck + ["tcp", "tc"] if fwd.use_tc else []) + (["wm"] if fwd_mod.wmma_usable(fwd.backend) else []) + ["gt"]


def use_mode(fwd, mode: str, monkeypatch) -> None:
    monkeypatch.setattr(fwd_mod, "SIMT_TILES", mode == "gt")
    monkeypatch.setattr(fwd_mod, "TC_TILE", "tch" if mode == "tch128" else mode if mode in fwd_mod.TC_TILES
                        else "tck")
    monkeypatch.setattr(fwd_mod, "TCH_WIDE_MIN_T", 1 if mode == "tch128" else 1 << 30)
    monkeypatch.setattr(fwd, "use_wmma", mode == "wm")


def upload(fwd, host: np.ndarray):
    return device_arrays.upload(fwd.backend, fwd.stream, host)


def download(fwd, buf, shape) -> np.ndarray:
    return device_arrays.download(fwd.backend, fwd.stream, buf, shape)


def record_launches(fwd, monkeypatch) -> list[str]:
    """The names of the kernels fwd launches from now on (they still run)."""
    launched: list[str] = []
    original = fwd._launch
    monkeypatch.setattr(fwd, "_launch", lambda f, n, *a, **k: (launched.append(n), original(f, n, *a, **k)))
    return launched


def glu_inputs(rng, tg: GGMLType, tu: GGMLType, n_ff: int, K: int, T: int):
    """Random gate (tg) and up (tu) rows and T activation rows: (raw gate, raw up, X, gate as float64, up as
    float64), drawn in that order."""
    raw_g, raw_u = random_matrix(rng, tg, n_ff, K), random_matrix(rng, tu, n_ff, K)
    G = dequantize(raw_g.reshape(-1), tg, n_ff * K).reshape(n_ff, K).astype(np.float64)
    U = dequantize(raw_u.reshape(-1), tu, n_ff * K).reshape(n_ff, K).astype(np.float64)
    return raw_g, raw_u, rng.standard_normal((T, K)).astype(np.float32), G, U


def silu_glu_reference(X, G, U) -> tuple[np.ndarray, np.ndarray]:
    """silu(X G^T) * (X U^T) in float64, and each output's float32-level scale (the bound's denominator)."""
    g, u = X.astype(np.float64) @ G.T, X.astype(np.float64) @ U.T
    ax = np.abs(X).astype(np.float64)
    return g / (1 + np.exp(-g)) * u, np.abs(u) * (ax @ np.abs(G).T) + (np.abs(g) + 1) * (ax @ np.abs(U).T)


def glu_case(fwd, monkeypatch, rng, tg: GGMLType, tu: GGMLType, n_ff: int, K: int, T: int) -> tuple[list[str], float]:
    """One SiLU GLU of random gate (tg) / up (tu) rows and T activation rows through fwd._glu: (the kernels it
    launched, max |A - A64| / the float32-level scale of each output)."""
    raw_g, raw_u, X, G, U = glu_inputs(rng, tg, tu, n_ff, K, T)
    want, scale = silu_glu_reference(X, G, U)
    monkeypatch.setattr(fwd, "config", dataclasses.replace(fwd.config, n_ff=n_ff, n_embd=K, activation="silu"))
    gd, ud, xd = upload(fwd, raw_g), upload(fwd, raw_u), upload(fwd, X)
    ad = fwd.backend.alloc((T, n_ff), np.float32)
    launched = record_launches(fwd, monkeypatch)
    try:
        fwd.backend.memset_async(ad, 0xFF, fwd.stream)
        fwd._glu(DeviceMatrix(gd, int(tg), n_ff, K), DeviceMatrix(ud, int(tu), n_ff, K), xd, T, ad)
        got = download(fwd, ad, (T, n_ff))
        return list(launched), float(np.max(np.abs(got - want) / scale))
    finally:
        for b in (gd, ud, xd, ad):
            fwd.backend.free(b)


@pytest.mark.parametrize("ggml_type", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("K,T", [(256, 9), (2560, 100), (1536, 128)])
def test_matmul_tiles_match_float64(fwd, ggml_type, K, T, monkeypatch):
    monkeypatch.setattr(fwd_mod, "BQ_BATCH", False)           # T = 9 would take a batched-decode kernel
    monkeypatch.setattr(fwd_mod, "TN_MIN_T", 99)
    rng = np.random.default_rng(K + T + int(ggml_type))
    rows = 64
    raw = random_matrix(rng, ggml_type, rows, K)
    W = dequantize(raw.reshape(-1), ggml_type, rows * K).reshape(rows, K).astype(np.float64)
    X = rng.standard_normal((T, K)).astype(np.float32)
    # K = 2560: the rows go through xrow as the LM head's do (a permutation of the tokens)
    order = rng.permutation(T).astype(np.int32) if K == 2560 else np.arange(T, dtype=np.int32)
    want = X[order].astype(np.float64) @ W.T
    bound = np.abs(X[order]).astype(np.float64) @ np.abs(W).T
    w_dev, x_dev, y_dev = upload(fwd, raw), upload(fwd, X), fwd.backend.alloc((T, rows), np.float32)
    idx_dev = upload(fwd, order) if K == 2560 else None
    m = DeviceMatrix(w_dev, int(ggml_type), rows, K)
    launched = []
    if K == 2560:
        monkeypatch.setattr(fwd_mod, "SPLIT_MIN_MACS", 0)      # split this small product anyway: test the path
    original = fwd._launch
    monkeypatch.setattr(fwd, "_launch", lambda f, n, *a, **k: (launched.append((n, a[0])), original(f, n, *a, **k)))
    try:
        for mode in modes(fwd, [ggml_type]):
            use_mode(fwd, mode, monkeypatch)
            launched.clear()
            fwd.backend.memset_async(y_dev, 0xFF, fwd.stream)          # NaN: every output must be written
            fwd._matmul([m], x_dev, T, y_dev, rows, xrow=idx_dev)
            got = download(fwd, y_dev, (T, rows))
            rel = float(np.max(np.abs(got - want) / bound))
            print(f"\n{ggml_type.name} K={K} T={T} {mode}: launches {launched}, max rel err {rel:.2e}")
            if mode in ("tch", "tch128"):                      # the activations' split first, then the tile
                assert launched.pop(0)[0] == "halo_split_f16"
            assert launched[0][0] == f"halo_matmul_{mode}"
            assert rel < BOUND
            if mode in fwd_mod.TC_KERNELS and K == 2560:
                assert launched[0][1][2] > 1 and launched[1][0] == "halo_splitk_sum"   # split K, then summed
    finally:
        for b in (w_dev, x_dev, y_dev, idx_dev):
            if b is not None:
                fwd.backend.free(b)


def test_mxfp4_rows_decode_exactly_as_engine_gguf(fwd):
    """dq8's MXFP4 decoder, read through halo_embed_norm's x (the rows times 1.0): the same float32 values as
    engine.gguf.dequantize (itself bit-exact against the gguf package) for every e8m0 exponent but 255
    (the subnormal scales of 0 and 1 included) and every e2m1 code."""
    rng = np.random.default_rng(39)
    rows, E, T = 16, 1024, 16
    raw = random_matrix(rng, GGMLType.MXFP4, rows, E)
    blocks = raw.reshape(-1, 17)
    blocks[:, 0] = np.arange(len(blocks)) % 255
    want = dequantize(raw.reshape(-1), GGMLType.MXFP4, rows * E).reshape(rows, E)
    ids = rng.permutation(rows).astype(np.int32)
    be = fwd.backend
    w_dev, ids_dev, slots_dev = upload(fwd, raw), upload(fwd, ids), upload(fwd, np.arange(T, dtype=np.int32))
    norm_dev = upload(fwd, np.ones(E, np.float32))
    x_dev, h_dev, at_slot = be.alloc((T, E), np.float32), be.alloc((T, E), np.float32), be.alloc(T, np.int32)
    try:
        m = DeviceMatrix(w_dev, int(GGMLType.MXFP4), rows, E)
        fwd._launch("halo_quant.cu", "halo_embed_norm", T, 256,
                    (w_dev, np.int32(m.ggml_type), np.int32(m.row_bytes), ids_dev, np.int32(E), np.float32(1.0),
                     norm_dev, np.float32(1e-6), x_dev, h_dev, slots_dev, at_slot))
        got = download(fwd, x_dev, (T, E))
        assert np.array_equal(got, want[ids])
    finally:
        for b in (w_dev, ids_dev, slots_dev, norm_dev, x_dev, h_dev, at_slot):
            be.free(b)


@pytest.mark.parametrize("K,T,act", [(512, 40, 0), (2560, 128, 1)])
def test_glu_tiles_match_float64(fwd, K, T, act, monkeypatch):
    rng = np.random.default_rng(K + T)
    n_ff = 96
    raw_g, raw_u, X, G, U = glu_inputs(rng, GGMLType.Q4_K, GGMLType.Q6_K, n_ff, K, T)
    g, u = X.astype(np.float64) @ G.T, X.astype(np.float64) @ U.T
    gate = g / (1 + np.exp(-g)) if act == 0 else 0.5 * g * (1 + np.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3)))
    want = gate * u
    ax = np.abs(X).astype(np.float64)
    scale = np.abs(u) * (ax @ np.abs(G).T) + (np.abs(gate) + 1) * (ax @ np.abs(U).T)
    monkeypatch.setattr(fwd, "config", dataclasses.replace(fwd.config, n_ff=n_ff, n_embd=K,
                                                           activation="silu" if act == 0 else "gelu_tanh"))
    gd, ud, xd = upload(fwd, raw_g), upload(fwd, raw_u), upload(fwd, X)
    ad = fwd.backend.alloc((T, n_ff), np.float32)
    if K == 2560:
        monkeypatch.setattr(fwd_mod, "SPLIT_MIN_MACS", 0)      # split K (two planes of partial sums), then summed
    launched = record_launches(fwd, monkeypatch)
    try:
        for mode in modes(fwd, [GGMLType.Q4_K, GGMLType.Q6_K]):
            use_mode(fwd, mode, monkeypatch)
            launched.clear()
            fwd.backend.memset_async(ad, 0xFF, fwd.stream)
            fwd._glu(DeviceMatrix(gd, int(GGMLType.Q4_K), n_ff, K), DeviceMatrix(ud, int(GGMLType.Q6_K), n_ff, K),
                     xd, T, ad)
            got = download(fwd, ad, (T, n_ff))
            rel = float(np.max(np.abs(got - want) / scale))
            print(f"\nglu K={K} T={T} act={act} {mode}: launches {launched}, max rel err {rel:.2e}")
            if mode in ("tch", "tch128"):
                assert launched.pop(0) == "halo_split_f16"
            assert launched[0] == f"halo_glu_{mode}"
            if mode in fwd_mod.TC_KERNELS and K == 2560:
                assert launched[1:] == ["halo_splitk_sum"]
            assert rel < 4 * BOUND
    finally:
        for b in (gd, ud, xd, ad):
            fwd.backend.free(b)


@pytest.mark.parametrize("kernel", ["kq", "bq"])
@pytest.mark.parametrize("ggml_type", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("T", [2, 5, 12, 16])
def test_batched_decode_matvec_matches_float64(fwd, ggml_type, T, kernel, monkeypatch):
    """9..16 tokens (a decode batch) take halo_matmul_bq_t16 (Q4_K / Q6_K, the default), 2..16 with KQ_BATCH
    halo_matmul_kq_t{4,8,16}: every output written, float32 accuracy; the rows go through xrow as the LM
    head's do (a permutation of the tokens). bq gets a row count that leaves its last block part empty."""
    if kernel == "bq" and (ggml_type not in fwd_mod.BQ_TYPES or T < fwd_mod.BQ_MIN_T):
        pytest.skip("halo_matmul_bq_t16 takes 9..16 tokens of Q4_K and Q6_K rows")
    monkeypatch.setattr(fwd_mod, "BQ_BATCH", kernel == "bq")
    monkeypatch.setattr(fwd_mod, "TN_MIN_T", 99)               # CUDA sm_80+ would take halo_matmul_tn_tN
    rng = np.random.default_rng(T + int(ggml_type))
    rows, K = (64, 512) if kernel == "kq" else (72, 768 if T < 16 else 9728)   # bq 9728: K split 8 ways, uneven
    tokens = fwd_mod.KQ_TOKENS if kernel == "kq" else fwd_mod.BQ_TOKENS
    raw = random_matrix(rng, ggml_type, rows, K)
    W = dequantize(raw.reshape(-1), ggml_type, rows * K).reshape(rows, K).astype(np.float64)
    X = rng.standard_normal((T, K)).astype(np.float32)
    order = rng.permutation(T).astype(np.int32)
    want = X[order].astype(np.float64) @ W.T
    bound = np.abs(X[order]).astype(np.float64) @ np.abs(W).T
    monkeypatch.setattr(fwd_mod, "KQ_BATCH", True)
    monkeypatch.setattr(fwd_mod, "MV_MAX_T", 0)                # else steps of up to 8 tokens take mv_tN
    w_dev, x_dev, idx_dev = upload(fwd, raw), upload(fwd, X), upload(fwd, order)
    y_dev = fwd.backend.alloc((T, rows), np.float32)
    launched = record_launches(fwd, monkeypatch)
    try:
        fwd.backend.memset_async(y_dev, 0xFF, fwd.stream)
        fwd._matmul([DeviceMatrix(w_dev, int(ggml_type), rows, K)], x_dev, T, y_dev, rows, xrow=idx_dev)
        got = download(fwd, y_dev, (T, rows))
        split = K == 9728
        assert launched == [f"halo_matmul_{kernel}_t{next(n for n in tokens if n >= T)}"] + \
            (["halo_splitk_sum"] if split else [])
        assert float(np.max(np.abs(got - want) / bound)) < BOUND
    finally:
        for b in (w_dev, x_dev, idx_dev, y_dev):
            fwd.backend.free(b)


@pytest.mark.parametrize("kernel", ["kq", "bq"])
@pytest.mark.parametrize("T", [3, 12, 16])
def test_batched_decode_glu_matches_float64(fwd, T, kernel, monkeypatch):
    if kernel == "bq" and T < fwd_mod.BQ_MIN_T:
        pytest.skip("halo_glu_bq_t16 takes 9..16 tokens")
    monkeypatch.setattr(fwd_mod, "BQ_BATCH", kernel == "bq")
    monkeypatch.setattr(fwd_mod, "TN_MIN_T", 99)
    monkeypatch.setattr(fwd_mod, "KQ_BATCH", True)
    monkeypatch.setattr(fwd_mod, "MV_MAX_T", 0)                # else steps of up to 8 tokens take mv_tN
    n_ff, K = (96, 512) if kernel == "kq" else (88, 1024)
    launched, rel = glu_case(fwd, monkeypatch, np.random.default_rng(T), GGMLType.Q4_K, GGMLType.Q6_K, n_ff, K, T)
    assert launched[0].startswith(f"halo_glu_{kernel}_t")
    assert rel < 4 * BOUND


@pytest.mark.parametrize("rows_per_warp", sorted(fwd_mod.MV_MATMUL_KERNELS))
@pytest.mark.parametrize("ggml_type", [GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
@pytest.mark.parametrize("T,K", [(1, 1024), (1, 8192), (1, 4096), (1, 2560)])
def test_decode_matvec_mv_matches_float64(fwd, ggml_type, T, K, rows_per_warp, monkeypatch):
    """halo_matmul_mv_t1 / halo_matmul_mv4_t1 (single-token steps, the default decode kernels: 2 / 4 rows per warp
    column) on three stacked segments of different types (q|k|v), with K split over 1, 2 and 4 warps: every output
    written, float32 accuracy, rows gathered through xrow as the LM head's are. 68 + 8 + 8 rows leave the last block
    part empty at every split."""
    monkeypatch.setattr(fwd_mod, "MV_MATMUL_R", rows_per_warp)
    rng = np.random.default_rng(T * 7 + K + int(ggml_type))
    seg_types = (ggml_type, ggml_type, GGMLType.Q6_K if ggml_type != GGMLType.Q6_K else GGMLType.Q4_K)
    seg_rows = (68, 8, 8)
    raws = [random_matrix(rng, t, n, K) for t, n in zip(seg_types, seg_rows, strict=True)]
    W = np.concatenate([dequantize(r.reshape(-1), t, n * K).reshape(n, K)
                        for r, t, n in zip(raws, seg_types, seg_rows, strict=True)]).astype(np.float64)
    X = rng.standard_normal((T, K)).astype(np.float32)
    order = rng.permutation(T).astype(np.int32)
    want = X[order].astype(np.float64) @ W.T
    bound = np.abs(X[order]).astype(np.float64) @ np.abs(W).T
    rows = sum(seg_rows)
    devs = [upload(fwd, r) for r in raws]
    x_dev, idx_dev, y_dev = upload(fwd, X), upload(fwd, order), fwd.backend.alloc((T, rows), np.float32)
    launched = record_launches(fwd, monkeypatch)
    try:
        fwd.backend.memset_async(y_dev, 0xFF, fwd.stream)
        mats = [DeviceMatrix(d, int(t), n, K) for d, t, n in zip(devs, seg_types, seg_rows, strict=True)]
        fwd._matmul(mats, x_dev, T, y_dev, rows, xrow=idx_dev)
        got = download(fwd, y_dev, (T, rows))
        assert launched == [fwd_mod.MV_MATMUL_KERNELS[rows_per_warp]]
        rel = float(np.max(np.abs(got - want) / bound))
        print(f"\nmv R={rows_per_warp} {ggml_type.name} T={T} K={K}: max rel err {rel:.2e}")
        assert rel < BOUND
    finally:
        for b in devs + [x_dev, idx_dev, y_dev]:
            fwd.backend.free(b)


@pytest.mark.parametrize("T,K,types", [(1, 2560, ("Q4_K", "Q4_K")), (1, 9728, ("Q4_K", "Q6_K")),
                                       (1, 4096, ("Q6_K", "Q4_K")), (1, 8192, ("Q6_K", "Q6_K"))])
def test_decode_glu_mv_matches_float64(fwd, T, K, types, monkeypatch):
    launched, rel = glu_case(fwd, monkeypatch, np.random.default_rng(T + K), GGMLType[types[0]], GGMLType[types[1]],
                             76, K, T)
    assert launched == [f"halo_glu_mv_t{next(n for n in fwd_mod.MV_TOKENS if n >= T)}"]
    assert rel < 4 * BOUND


def tn_only(fwd):
    if not fwd.use_tc:
        pytest.skip("halo_*_tn_tN need tensor cores (CUDA sm_80+)")


@pytest.mark.parametrize("T", [1, 2, 5, 8, 9, 16])
@pytest.mark.parametrize("K,types", [(256, ("Q4_K", "Q4_K", "Q6_K")), (2560, ("Q4_K", "Q6_K", "Q6_K")),
                                     (9728, ("Q6_K", "Q4_K", "Q4_K"))])
def test_batched_decode_tn_matches_float64(fwd, T, K, types, monkeypatch):
    """halo_matmul_tn_t{8,16} (2..16 tokens on tensor cores; one token behind HALO_GPU_TN_MIN_T=1) on three
    stacked segments (q|k|v) of mixed types, with a bias and the rows gathered through xrow: every output
    written, float32 accuracy. One block of 8 row groups (3 without rows); K split over blocks (partial sums)
    for K = 2560 and 9728, none for 256."""
    tn_only(fwd)
    monkeypatch.setattr(fwd_mod, "TN_MIN_T", 1)
    rng = np.random.default_rng(T * 31 + K)
    seg_types, seg_rows = [GGMLType[t] for t in types], (48, 16, 16)
    raws = [random_matrix(rng, t, n, K) for t, n in zip(seg_types, seg_rows, strict=True)]
    W = np.concatenate([dequantize(r.reshape(-1), t, n * K).reshape(n, K)
                        for r, t, n in zip(raws, seg_types, seg_rows, strict=True)]).astype(np.float64)
    rows = sum(seg_rows)
    X = rng.standard_normal((T, K)).astype(np.float32)
    bias = rng.standard_normal(rows).astype(np.float32)
    order = rng.permutation(T).astype(np.int32)
    want = X[order].astype(np.float64) @ W.T + bias
    bound = np.abs(X[order]).astype(np.float64) @ np.abs(W).T
    devs = [upload(fwd, r) for r in raws]
    x_dev, idx_dev, b_dev = upload(fwd, X), upload(fwd, order), upload(fwd, bias)
    y_dev = fwd.backend.alloc((T, rows), np.float32)
    launched = record_launches(fwd, monkeypatch)
    try:
        fwd.backend.memset_async(y_dev, 0xFF, fwd.stream)
        mats = [DeviceMatrix(d, int(t), n, K) for d, t, n in zip(devs, seg_types, seg_rows, strict=True)]
        fwd._matmul(mats, x_dev, T, y_dev, rows, bias=b_dev, xrow=idx_dev)
        got = download(fwd, y_dev, (T, rows))
        assert launched == [f"halo_matmul_tn_t{8 if T <= 8 else 16}"] + (["halo_splitk_sum"] if K > 256 else [])
        rel = float(np.max(np.abs(got - want) / bound))
        print(f"\ntn T={T} K={K}: max rel err {rel:.2e}")
        assert rel < BOUND
    finally:
        for b in devs + [x_dev, idx_dev, b_dev, y_dev]:
            fwd.backend.free(b)


@pytest.mark.parametrize("T", [3, 8, 12, 16])
@pytest.mark.parametrize("K,types", [(2560, ("Q4_K", "Q4_K")), (9728, ("Q4_K", "Q6_K")), (1024, ("Q6_K", "Q6_K"))])
def test_batched_decode_glu_tn_matches_float64(fwd, T, K, types, monkeypatch):
    """halo_glu_tn_t{8,16}: gate and up of the same or mixed types, K split (two planes of partial sums, then the
    activation), float32 accuracy."""
    tn_only(fwd)
    launched, rel = glu_case(fwd, monkeypatch, np.random.default_rng(T + 3 * K), GGMLType[types[0]],
                             GGMLType[types[1]], 80, K, T)
    assert launched == [f"halo_glu_tn_t{8 if T <= 8 else 16}", "halo_splitk_sum"]
    assert rel < 4 * BOUND


@pytest.mark.parametrize("wide", [False, True], ids=["tch", "tch128"])
@pytest.mark.parametrize("ggml_type", [GGMLType.Q4_K, GGMLType.Q6_K], ids=lambda t: t.name)
def test_tch_scales_every_token_on_its_own(fwd, ggml_type, wide, monkeypatch):
    """tch's pre-pass scales each token by its own power of two (f16's range is narrow): tokens from 1e-30 to 1e30,
    two with a single large outlier, one all zeros, through split K, still at float32 level per output."""
    if not fwd.use_tc:
        pytest.skip("tch needs CUDA tensor cores")
    monkeypatch.setattr(fwd_mod, "TC_TILE", "tch")
    monkeypatch.setattr(fwd_mod, "TCH_WIDE_MIN_T", 1 if wide else 1 << 30)
    monkeypatch.setattr(fwd_mod, "SPLIT_MIN_MACS", 0)
    rng = np.random.default_rng(77 + int(ggml_type))
    rows, K, T = 64, 2048, 70
    raw = random_matrix(rng, ggml_type, rows, K)
    W = dequantize(raw.reshape(-1), ggml_type, rows * K).reshape(rows, K).astype(np.float64)
    X = rng.standard_normal((T, K)).astype(np.float32) * (10.0 ** rng.uniform(-30, 30, size=(T, 1))).astype(np.float32)
    X[5] = 0.0
    X[6, 100] = 1e6 * np.abs(X[6]).max()
    X[7, 256] = 1e6 * np.abs(X[7]).max()              # first in its super-block: every later MMA there adds to it
    want = X.astype(np.float64) @ W.T
    bound = np.abs(X).astype(np.float64) @ np.abs(W).T
    w_dev, x_dev, y_dev = upload(fwd, raw), upload(fwd, X), fwd.backend.alloc((T, rows), np.float32)
    try:
        fwd.backend.memset_async(y_dev, 0xFF, fwd.stream)
        fwd._matmul([DeviceMatrix(w_dev, int(ggml_type), rows, K)], x_dev, T, y_dev, rows)
        got = download(fwd, y_dev, (T, rows))
        assert np.all(got[5] == 0.0)
        live = np.arange(T) != 5
        rel = float(np.max(np.abs(got[live] - want[live]) / bound[live]))
        print(f"\n{ggml_type.name} tch per-token scales: max rel err {rel:.2e}")
        assert rel < BOUND
    finally:
        for b in (w_dev, x_dev, y_dev):
            fwd.backend.free(b)


def moe_inputs(rng, n_expert: int, k: int, E: int, F: int, tg: GGMLType, td: GGMLType, biases: bool = False,
               T: int = 1) -> dict:
    """T tokens' MoE FFN inputs: stacked experts as GGUF stores them (gate and up of type tg, [n_expert * F, E];
    down of type td, [n_expert * E, F]), activation rows X [T, E], per token k distinct expert ids (best first) with
    softmax weights, biases or None; the stacks also as float64 (G, U: [n_expert, F, E], D: [n_expert, E, F])."""
    raw = {n: random_matrix(rng, t, n_expert * rows, cols)
           for n, t, rows, cols in (("gate", tg, F, E), ("up", tg, F, E), ("down", td, E, F))}
    f64 = {n: dequantize(r.reshape(-1), t, r.shape[0] * cols).astype(np.float64).reshape(n_expert, -1, cols)
           for (n, r), t, cols in zip(raw.items(), (tg, tg, td), (E, E, F), strict=True)}
    top = -np.sort(-rng.standard_normal((T, k)), axis=1)
    w = np.exp(top - top[:, :1])
    bias = (lambda n: rng.standard_normal(n).astype(np.float32)) if biases else (lambda n: None)
    return dict(raw=raw, G=f64["gate"], U=f64["up"], D=f64["down"], X=rng.standard_normal((T, E)).astype(np.float32),
                ids=np.stack([rng.permutation(n_expert)[:k] for _ in range(T)]).astype(np.int32),
                w=(w / w.sum(axis=1, keepdims=True)).astype(np.float32), bg=bias(n_expert * F), bu=bias(n_expert * F),
                bd=bias(n_expert * E))


def moe_reference(m: dict) -> tuple[np.ndarray, np.ndarray]:
    """Y [T, E]: per token, sum_j w_j (down_e silu(gate_e x + bg_e) (up_e x + bu_e) + bd_e), e = ids[t, j], in
    float64, and each output's float32-level scale: the hidden activation's own scale (silu_glu_reference's) carried
    through the down product, plus the products' and biases' magnitudes."""
    F, E = m["G"].shape[1], m["D"].shape[1]
    Y, S = np.zeros((len(m["X"]), E)), np.zeros((len(m["X"]), E))
    for t, row in enumerate(m["X"].astype(np.float64)):
        ax = np.abs(row)
        for e, w in zip(m["ids"][t], m["w"][t].astype(np.float64), strict=True):
            part = {n: (0.0 if m[n] is None else m[n].reshape(-1, rows)[e].astype(np.float64))
                    for n, rows in (("bg", F), ("bu", F), ("bd", E))}
            g, u = m["G"][e] @ row + part["bg"], m["U"][e] @ row + part["bu"]
            a = g * (0.5 + 0.5 * np.tanh(0.5 * g)) * u             # silu without exp overflow
            sa = np.abs(u) * (np.abs(m["G"][e]) @ ax + np.abs(part["bg"])) + (np.abs(g) + 1) * (
                np.abs(m["U"][e]) @ ax + np.abs(part["bu"]))
            Y[t] += w * (m["D"][e] @ a + part["bd"])
            S[t] += w * (np.abs(m["D"][e]) @ (np.abs(a) + sa) + np.abs(part["bd"]))
    return Y, S


@pytest.mark.parametrize("n_expert,k,types,T", [(16, 4, ("Q4_K", "Q6_K"), 1), (24, 10, ("Q4_K", "Q4_K"), 1),
                                                (8, 8, ("Q6_K", "Q6_K"), 1), (16, 4, ("Q4_K", "Q6_K"), 37),
                                                (8, 6, ("Q4_K", "Q4_K"), 40), (24, 8, ("Q6_K", "Q4_K"), 3),
                                                (4, 2, ("Q4_K", "Q6_K"), 70), (3, 2, ("Q6_K", "Q4_K"), 100),
                                                (8, 4, ("MXFP4", "MXFP4"), 40), (3, 2, ("Q8_0", "Q4_0"), 100)])
def test_moe_ffn_matches_float64(fwd, n_expert, k, types, T, monkeypatch):
    """A step's MoE FFN (engine.gpu.moe.enqueue_moe_ffn) on Q4_K / Q6_K experts: the router's matmul and top k on the
    device, then one token's expert products on halo_moe_glu_mv_t1 / halo_moe_down_mv_t1 (K = 768 leaves a lane group
    of the down rows idle; 10 slots make some warps take two), or several tokens' grouped by expert in tiles, on
    tensor cores (halo_moe_*_tn_t8; t16 where the step averages 16 pairs an expert: 40 x 6 over 8; tch's f16 tile
    halo_moe_*_th_t32 / _t64 where it averages 32 / 64: 70 x 2 over 4, 100 x 2 over 3) and on the SIMT path
    (halo_moe_*_bq_tN, HIP's); experts of other types (MXFP4, Q8_0 / Q4_0) and, forced, the K-quant ones in tiles of
    64 on the dense tiles' k loops (halo_moe_*_tp on tensor cores, halo_moe_*_gt on the SIMT path): the ids must be
    float64's top k, the output float32-level accurate. The same step on the kernels these replaced (the decode
    matvecs off: halo_moe_glu / _down; halo_moe_*_grouped) is held to the same bound."""
    from engine.gpu.moe import (
        MOE_TH_TILES,
        MOE_TILES,
        DeviceExperts,
        DeviceMoe,
        MoeScratch,
        enqueue_moe_ffn,
        tile_size,
    )
    from engine.model.moe import route
    E, F = 512, 768
    tg, td = GGMLType[types[0]], GGMLType[types[1]]
    rng = np.random.default_rng(n_expert * 100 + k + T)
    m = moe_inputs(rng, n_expert, k, E, F, tg, td, T=T)
    router = rng.standard_normal((n_expert, E)).astype(np.float32)
    ids, w = route(m["X"].astype(np.float64) @ router.T.astype(np.float64), k)
    m.update(ids=ids.astype(np.int32), w=w)
    want, scale = moe_reference(m)
    cfg = dataclasses.replace(fwd.config, n_embd=E, n_expert=n_expert, n_expert_used=k, n_ff_exp=F,
                              expert_activation="swiglu")
    monkeypatch.setattr(fwd, "config", cfg)
    devs = {n: upload(fwd, r) for n, r in m["raw"].items()}
    rd, xd, yd = upload(fwd, router), upload(fwd, m["X"]), fwd.backend.alloc((T, E), np.float32)
    moe = DeviceMoe(DeviceMatrix(rd, int(GGMLType.F32), n_expert, E), DeviceExperts(devs["gate"], int(tg), n_expert, F, E),
                    DeviceExperts(devs["up"], int(tg), n_expert, F, E), DeviceExperts(devs["down"], int(td), n_expert, E, F))
    scratch = MoeScratch(fwd.backend, cfg, T)
    launched = record_launches(fwd, monkeypatch)
    nt = {"th": tile_size(MOE_TH_TILES, T * k, n_expert), "tn": tile_size(MOE_TILES, T * k, n_expert)}
    nt["bq"] = nt["tn"]
    if T == 1:                                        # (MV_MAX_T, the expert kernels it launches)
        runs = [(1, ["halo_moe_glu_mv_t1", "halo_moe_down_mv_t1"]), (0, ["halo_moe_glu", "halo_moe_down"])]
    else:                                             # (HALO_GPU_MOE_PREFILL, ...), the default first
        kquants = {tg, td} <= {GGMLType.Q4_K, GGMLType.Q6_K}
        tc = ((["th"] if T * k >= MOE_TH_TILES[0] * n_expert else []) + ["tn"]) if fwd.use_tc and kquants else []
        runs = [(kind, [f"halo_moe_glu_{kind}_t{nt[kind]}", f"halo_moe_down_{kind}_t{nt[kind]}"])
                for kind in tc + (["bq"] if kquants else [])]
        runs += [(kind, [f"halo_moe_glu_{kind}", f"halo_moe_down_{kind}"])
                 for kind in (["tp"] if fwd.use_tc else []) + ["gt"]]
        runs.append(("grouped", ["halo_moe_glu_grouped", "halo_moe_down_grouped"]))
    try:
        for setting, kernels in runs:
            if T == 1:
                monkeypatch.setattr(fwd_mod, "MV_MAX_T", setting)
            elif setting != runs[0][0]:
                monkeypatch.setenv("HALO_GPU_MOE_PREFILL", setting)
            launched.clear()
            fwd.backend.memset_async(yd, 0xFF, fwd.stream)
            enqueue_moe_ffn(fwd, moe, scratch, T, xd, yd)
            got = download(fwd, yd, (T, E))
            np.testing.assert_array_equal(download(fwd, scratch.ids, (T, k)).view(np.int32), m["ids"])
            assert [n for n in launched if n.startswith(("halo_moe_glu", "halo_moe_down"))] == kernels
            rel = float(np.max(np.abs(got - want) / scale))
            print(f"\nMoE FFN {types} n_expert={n_expert} k={k} T={T} {kernels[0]}: max rel err {rel:.2e}")
            assert rel < 4 * BOUND
    finally:
        for b in [*devs.values(), rd, xd, yd, *scratch.buffers]:
            fwd.backend.free(b)
