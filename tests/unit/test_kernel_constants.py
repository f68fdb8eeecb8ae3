"""Sizes the host and the kernels must agree on: the kernels' `#define`s (array sizes, block shapes) against the
engine.gpu constants that size grids, blocks and contracts. A change on one side only fails here, not as
wrong results on a GPU."""
from __future__ import annotations

import re

import pytest

import engine.gpu.forward as fwd
import engine.gpu.hybrid as hybrid
import engine.gpu.moe as moe
import engine.gpu.weights as weights
from engine.backends import kernels
from engine.model import arch


def defines(file: str) -> dict[str, int]:
    text = (kernels.KERNEL_DIR / file).read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define (\w+) (\d+)\b", text, re.M)}


@pytest.mark.parametrize("file,name,host", [
    ("halo_layer.cu", "AN_PER", weights.ADD_NORM_PER_THREAD),
    ("halo_layer.cu", "SKV_WARPS", fwd.SKV_WARPS),
    ("halo_layer.cu", "SKV_MAX_GROUP", fwd.SKV_MAX_GROUP),
    ("halo_layer.cu", "FA_MAX_ROWS", arch.FA_ROWS[-1]),
    ("halo_layer.cu", "FA_MAX_D", arch.FA_MAX_D),
    ("halo_layer.cu", "FA_KEYS", fwd.FA_KEYS),
    ("halo_layer.cu", "FA_SPLIT_SHARED_BYTES", fwd.FA_SPLIT_SHARED_BYTES),
    ("halo_layer.cu", "FA_SCALE_KEYS", arch.KV_SPLIT_SCALE_KEYS),
    ("halo_quant.cu", "MV_WARPS", fwd.MV_WARPS),
    ("halo_quant.cu", "MV_R", fwd.MV_R),
    ("halo_quant.cu", "BQ_WARPS", fwd.MATMUL_WARPS),
    ("halo_quant.cu", "TN_WARPS", fwd.TN_WARPS),
    ("halo_quant.cu", "TN_ROWS", fwd.TN_ROWS),
    ("halo_quant.cu", "GT_BM", fwd.GT_ROWS),
    ("halo_quant.cu", "GT_BN", fwd.GT_TOKENS),
    ("halo_quant.cu", "GT_BK", fwd.GT_K),
    ("halo_quant.cu", "TP_BM", fwd.TCP_ROWS),
    ("halo_quant.cu", "MOE_WIDE_NT", moe.MOE_WIDE_NT),
    ("halo_delta_net.cu", "CONV_CHANNELS", hybrid.CONV_CHANNELS),
    ("halo_delta_net.cu", "CONV_SPANS", hybrid.CONV_SPANS),
])
def test_host_constant_matches_the_kernel(file, name, host):
    assert defines(file)[name] == host


def test_delta_rule_block_and_limits_match_the_host():
    """halo_delta_rule's block (DR_WARPS warps of DR_COLS state columns: DELTA_THREADS threads, RULE_COLUMNS
    columns a block in the host's grid), the widest key head its registers and staged rows hold (RECURRENT_MAX_DK,
    which weights.gpu_refusal checks), and the chunked kernel's (CHUNKED_MAX_DK)."""
    d = defines("halo_delta_net.cu")
    assert 32 * d["DR_WARPS"] == hybrid.DELTA_THREADS
    assert d["DR_COLS"] * d["DR_WARPS"] == hybrid.RULE_COLUMNS
    assert (32 // d["DR_COLS"]) * d["DR_ROWS"] == d["DR_MAX_PAD"] == hybrid.RECURRENT_MAX_DK
    assert d["DC_MAX_DK"] == hybrid.CHUNKED_MAX_DK


def test_split_kv_limits_fit_the_kernels():
    """Every build split_kernel can ask for exists in the kernel's table of builds, with the element type, lanes
    per key row (walkers per warp) and head size its class needs, and a group bound at least the group asked for."""
    layer = defines("halo_layer.cu")
    assert fwd.SKV_CHUNKS <= layer["SKV_MERGE_MAX"]
    assert fwd.SKV_MAX_D <= 256                                   # the merge's osum holds SKV_MERGE_GROUPS x 256
    for D in range(8, fwd.SKV_MAX_D + 1, 8):
        for chunks in (fwd.SKV_MIN_CHUNKS, fwd.SKV_CHUNKS):
            threads = fwd.merge_threads(D, chunks)
            assert threads % 32 == 0 and 32 <= threads <= 1024
    assert fwd.SKV_MAX_GROUP == layer["SKV_MAX_GROUP"] == max(fwd.SKV_GROUPS)
    assert fwd.SKV_WARPS == layer["SKV_WARPS"]
    text = (kernels.KERNEL_DIR / "halo_layer.cu").read_text()
    rows = re.finditer(r"^SKV_GROUPS\((\w+),\s*(float|unsigned short),\s*(\d+),\s*(\d+),\s*\d+,\s*\w+\)", text, re.M)
    builds = {m[1]: (m[2], int(m[3]), int(m[4])) for m in rows}
    groups = {int(g) for g in re.findall(r"^SKV_ENTRY\(NAME##_g(\d+), KV, LPK, NV, UNROLL, \1, PREFETCH\)", text, re.M)}
    assert groups == set(fwd.SKV_GROUPS)
    asked = set()
    for D in (64, 80, 96, 128, 192, 256):
        for group in range(1, fwd.SKV_MAX_GROUP + 1):
            for f16 in (False, True):
                name, walkers = fwd.split_kernel(D, group, f16)
                base, g = name.rsplit("_g", 1)
                element, lanes, nv = builds[base]
                per_vector = 8 if f16 else 4                      # 16 bytes of f16 or float32
                assert int(g) >= group and lanes * nv * per_vector >= D
                assert (element == "unsigned short") == f16 and walkers == 32 // lanes
                assert fwd.split_shared_bytes(D, group, f16) <= 48 * 1024     # no opt-in shared memory needed
                asked.add(base)
    assert asked == set(builds)                                   # no build the host never asks for
    mma_builds = set(re.findall(r"^SKV_MMA_ENTRY\((halo_attention_split_mma_d(\d+)_f16), \2, \w+\)", text, re.M))
    assert {D for _, D in mma_builds} == {str(D) for D in fwd.SKV_MMA_WIDTHS}
    for D in (64, 80, 96, 128, 192, 256):
        for group in range(1, fwd.SKV_MAX_GROUP + 1):
            for f16 in (False, True):
                name, walkers = fwd.split_kernel(D, group, f16, tensor_cores=True)
                if name.startswith("halo_attention_split_mma_"):  # f16 caches of the MMA widths only, a walker a warp
                    assert f16 and name == f"halo_attention_split_mma_d{D}_f16" and walkers == 1
                else:
                    assert name == fwd.split_kernel(D, group, f16)[0]
                assert fwd.split_shared_bytes(D, group, f16, True) <= 48 * 1024


def test_simt_prefill_tile_shapes_and_builds_match_the_host():
    """halo_attention_ts: the host's query rows per block (TS_ROWS, which sizes the grid) are the kernel's R per
    head-size class, and every class has an f32 and an f16 cache build under the name ts_kernel asks for."""
    text = (kernels.KERNEL_DIR / "halo_layer.cu").read_text()
    shapes = {int(m[1]): int(m[2]) for m in
              re.finditer(r"^template <> struct TsShape<(\d+)> \{ enum \{ R = (\d+), TK = \d+ \}; \};", text, re.M)}
    assert shapes == fwd.TS_ROWS
    builds = set(re.findall(r"^ATTENTION_TS_ENTRY\((\w+), (?:float|unsigned short), (\d+)\)", text, re.M))
    want = {(fwd.ts_kernel(d, f16), str(d)) for d in fwd.TS_ROWS for f16 in (False, True)}
    assert builds == want


def test_the_kv_block_size_is_a_power_of_two_and_the_gpu_cache_refuses_others():
    """prelude.h's kv_slot divides positions by the block size with a shift: the engine's BLOCK_SIZE must be a
    power of two, and GpuKVCache turns away any other size before it allocates anything."""
    from engine.gpu.forward import GpuKVCache
    from engine.model.arch import BLOCK_SIZE
    assert BLOCK_SIZE > 0 and BLOCK_SIZE & (BLOCK_SIZE - 1) == 0
    for bad in (0, 12, 24):
        with pytest.raises(ValueError, match="power of two"):
            GpuKVCache(None, None, 4, bad, 8, 1, None)
