"""engine.gpu.bench's per-kernel breakdown: each launch of a step body gets its role by position, the launches that
belong to another (split-K sum, split-KV merge, the MoE th tiles' row lists) or have their own (the tch tile's
activation split, a float32 cache's key split) do not shift the roles after them."""
from __future__ import annotations

from engine.gpu.bench import LAYER_ROLES, MOE_PREFILL_ROLES, _launch_roles


def test_split_launches_keep_the_layer_roles_in_place():
    layer = ["halo_split_f16", "halo_matmul_tch", "halo_splitk_sum", "halo_rope_kv", "halo_kv_split",
             "halo_attention_tc_split", "halo_split_f16", "halo_matmul_tch", "halo_add_norm", "halo_split_f16",
             "halo_glu_tch",
             "halo_split_f16", "halo_matmul_tch", "halo_splitk_sum", "halo_add_norm"]
    names = ["halo_embed_norm"] + layer * 2 + ["halo_matmul_tc", "halo_sample"]
    roles = _launch_roles(names, 2, LAYER_ROLES)
    assert roles[0] == "embedding+norm" and roles[-2:] == ["lm head", "sampler"]
    per_layer = roles[1:1 + len(layer)]
    assert per_layer == roles[1 + len(layer):1 + 2 * len(layer)]
    assert per_layer == ["f16 split", "qkv matmul", "qkv matmul", "rope+kv write", "kv split", "attention", "f16 split",
                         "wo matmul", "add+norm", "f16 split", "gate/up glu", "f16 split", "down matmul",
                         "down matmul", "add+norm"]


def test_moe_prefill_launches_keep_the_layer_roles_in_place():
    """A wide MoE step on the th tiles: the sort's row lists and the two expert inputs' splits shift nothing."""
    layer = ["halo_split_f16", "halo_matmul_tch", "halo_rope_kv", "halo_attention_tc", "halo_split_f16",
             "halo_matmul_tch", "halo_add_norm", "halo_matmul_tc", "halo_moe_route", "halo_moe_sort",
             "halo_moe_tile_rows", "halo_split_f16", "halo_moe_glu_th_t32", "halo_split_f16", "halo_moe_down_th_t32",
             "halo_moe_combine", "halo_add_norm"]
    names = ["halo_embed_norm"] + layer * 2 + ["halo_matmul_tc", "halo_sample"]
    roles = _launch_roles(names, 2, MOE_PREFILL_ROLES)
    assert roles[-2:] == ["lm head", "sampler"]
    assert roles[1:1 + len(layer)] == ["f16 split", "qkv matmul", "rope+kv write", "attention", "f16 split",
                                       "wo matmul", "add+norm", "router matmul", "moe top-k", "moe sort", "moe sort",
                                       "f16 split", "moe gate/up", "f16 split", "moe down", "moe combine", "add+norm"]
