"""Sizes the host and the kernels must agree on: the kernels' `#define`s (array sizes, block shapes) against the
engine.gpu constants that size grids, blocks and contracts. A change on one side only fails here, not as
wrong results on a GPU."""
from __future__ import annotations

import re

import pytest

import engine.gpu.forward as fwd
import engine.gpu.weights as weights
from engine.backends import kernels


def defines(file: str) -> dict[str, int]:
    text = (kernels.KERNEL_DIR / file).read_text()
    return {m[1]: int(m[2]) for m in re.finditer(r"^#define (\w+) (\d+)\b", text, re.M)}


@pytest.mark.parametrize("file,name,host", [
    ("halo_layer.cu", "AN_PER", weights.ADD_NORM_PER_THREAD),
    ("halo_layer.cu", "SKV_WARPS", fwd.SKV_WARPS),
    ("halo_layer.cu", "SKV_MAX_GROUP", fwd.SKV_MAX_GROUP),
    ("halo_quant.cu", "MV_WARPS", fwd.MV_WARPS),
    ("halo_quant.cu", "MV_R", fwd.MV_R),
    ("halo_quant.cu", "BQ_WARPS", fwd.MATMUL_WARPS),
    ("halo_quant.cu", "TN_WARPS", fwd.TN_WARPS),
    ("halo_quant.cu", "TN_ROWS", fwd.TN_ROWS),
])
def test_host_constant_matches_the_kernel(file, name, host):
    assert defines(file)[name] == host


def test_split_kv_limits_fit_the_kernels():
    layer = defines("halo_layer.cu")
    assert fwd.SKV_CHUNKS <= layer["SKV_MERGE_MAX"]
    text = (kernels.KERNEL_DIR / "halo_layer.cu").read_text()
    per_lane = {m[1]: int(m[2]) for m in re.finditer(r"^SKV_ENTRY\((\w+), (\d+), \d+\)", text, re.M)}
    assert 32 * per_lane["halo_attention_split"] == fwd.SKV_NARROW_D
    assert 32 * per_lane["halo_attention_split_d256"] == fwd.SKV_MAX_D
