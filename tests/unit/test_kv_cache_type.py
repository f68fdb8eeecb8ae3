"""The KV cache element type (engine.model.arch.KV_CACHE_TYPES) from the user to the cache: names checked where
they come in (the Engine, the CLI), the memory figures of every type worked out by hand from the config, the
CPU keeping float32 whatever is asked and saying so. The GPU cache itself, allocated through the Engine's GPU
builder on the CPU backend, is in test_gpu_preflight_host_logic.py."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine import cli
from engine.api import estimate_memory
from engine.engine import Engine
from engine.gguf import open_gguf
from engine.gpu import preflight
from engine.model import arch
from engine.model.config import ModelConfig

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"


def _config(name: str):
    with open_gguf(DATA / f"{name}.gguf") as g:
        return ModelConfig.from_metadata(g.metadata), list(g.tensors.values())


@pytest.mark.parametrize("name", ["tiny-qwen3-q4_k_m", "tiny-qwen35-q8_0"])
def test_bytes_per_token_of_each_type_from_the_config(name):
    """K and V of every attention layer (qwen35: 1 of its 4 layers), 4 bytes a value in f32, 2 in f16, plus the
    GPU's int32 token id per slot and, for f32, the prefill split copy (one layer's K and V as f16 heads and
    tails, a float4 of factors per 16 slots and kv head); the CPU holds f32 whatever is asked."""
    c, _ = _config(name)
    n_attn = {"tiny-qwen3-q4_k_m": 2, "tiny-qwen35-q8_0": 1}[name]
    kv_values = 2 * n_attn * c.n_head_kv * c.head_dim             # K and V per token
    split = 2 * c.n_head_kv * c.head_dim * 4 + c.n_head_kv * 16 // 16
    assert arch.kv_bytes_per_token(c, "gpu", "f32") == kv_values * 4 + 4 + split
    assert arch.kv_bytes_per_token(c, "gpu", "f16") == kv_values * 2 + 4
    assert arch.kv_bytes_per_token(c, "cpu", "f16") == arch.kv_bytes_per_token(c, "cpu", "f32") == kv_values * 4
    assert arch.kv_bytes_per_token(c, "gpu") == kv_values * 4 + 4 + split         # the default is exact f32


def test_heads_the_tensor_core_tile_does_not_take_get_no_split_copy():
    """The float32 cache's prefill split copy serves only the tensor-core attention tile: a model whose heads it
    does not take (256 wide, as gemma-3's and Qwen3.5's) is estimated and allocated without it (it used to hold
    a layer's K and V for nothing: an eighth of Qwen3.5's cache)."""
    from engine.backends import registry
    from engine.gpu.forward import GpuKVCache

    c, _ = _config("tiny-qwen3-q4_k_m")
    wide = dataclasses.replace(c, head_dim=256)
    assert arch.flash_usable(c) and not arch.flash_usable(wide)
    kv_values = 2 * 2 * wide.n_head_kv * 256                        # K and V of its 2 attention layers
    assert arch.kv_split_bytes_per_token(wide, "gpu", "f32") == 0 < arch.kv_split_bytes_per_token(c, "gpu", "f32")
    assert arch.kv_bytes_per_token(wide, "gpu", "f32") == kv_values * 4 + 4
    backend = registry.create("cpu")
    kv = GpuKVCache(backend, wide, 4, 16, 32, 2, None, 2, "f32")
    try:
        assert kv.split is None and kv.split_k is None and kv.split_scales is None
        assert kv.nbytes == arch.kv_cache_bytes(wide, 4, 16, "gpu", "f32")
    finally:
        kv.free()


def test_the_estimate_and_the_gpu_preflight_count_half_the_kv_in_f16():
    c, tensors = _config("tiny-qwen35-q8_0")
    f32 = arch.memory_estimate(c, 100, "gpu", tensors, num_seqs=3, kv_type="f32")
    f16 = arch.memory_estimate(c, 100, "gpu", tensors, num_seqs=3, kv_type="f16")
    slots = 7 * arch.BLOCK_SIZE                                      # ceil(100 / 16) blocks
    kv_values = 2 * 1 * c.n_head_kv * c.head_dim
    split = kv_values * 4 + c.n_head_kv                              # f32's prefill split copy (its one layer)
    assert f16.kv_cache == slots * (kv_values * 2 + 4) and f32.kv_cache == slots * (kv_values * 4 + 4 + split)
    assert (f16.weights, f16.recurrent_state) == (f32.weights, f32.recurrent_state)   # only K and V shrink
    assert arch.memory_estimate(c, 100, "cpu", tensors, kv_type="f16") == arch.memory_estimate(c, 100, "cpu", tensors)
    # the Engine's pre-flight: the same bytes plus each sequence's recurrent state
    plan = preflight.plan_memory(c, tensors, 7, arch.BLOCK_SIZE, 64, 3, "f16")
    assert plan.kv == f16.kv_cache + 3 * arch.recurrent_state_bytes(c)
    assert plan.weights == preflight.plan_memory(c, tensors, 7, arch.BLOCK_SIZE, 64, 3).weights
    # the app's estimate (engine.api) passes the setting through
    est = estimate_memory(str(DATA / "tiny-qwen35-q8_0.gguf"), 100, "gpu", num_seqs=3, kv_cache_type="f16")
    assert est == f16


def test_more_f16_blocks_fit_in_the_same_memory():
    c, tensors = _config("tiny-llama-q4_1")
    free = 2 << 30
    n32 = preflight.max_kv_blocks(c, tensors, 16, 512, 16, free)
    n16 = preflight.max_kv_blocks(c, tensors, 16, 512, 16, free, kv_type="f16")
    # a block costs K/V + token ids + a block-table column: f16 halves only the first
    per32 = preflight.kv_bytes(c, 1, 16, "f32") + 4 * 16
    per16 = preflight.kv_bytes(c, 1, 16, "f16") + 4 * 16
    assert per16 < per32 and n16 == pytest.approx(n32 * per32 / per16, rel=1e-3)
    assert preflight.plan_memory(c, tensors, n16, 16, 512, 16, "f16").total <= free


@pytest.mark.parametrize("bad", ["q8_0", "F16", "fp16", ""])
def test_an_unknown_type_is_refused_with_the_choices(bad):
    with pytest.raises(ValueError, match=r"KV cache type must be one of f32, f16, not "):
        arch.kv_cache_type(bad, "gpu")
    with pytest.raises(ValueError, match=r"KV cache type must be one of f32, f16"):
        Engine(backend="cpu", kv_cache_type=bad)          # at construction, before any load


def test_the_cpu_engine_keeps_f32_says_so_and_allocates_what_the_estimate_says():
    path = DATA / "tiny-qwen35-q8_0.gguf"
    engine = Engine(max_context=200, backend="cpu", max_num_seqs=2, kv_cache_type="f16")
    try:
        info = engine.load(path).result(timeout=60)
        stats = engine.stats()
    finally:
        engine.shutdown()
    assert info.backend == "cpu" and info.kv_cache_type == "f32"
    est = estimate_memory(str(path), 200, "cpu", num_seqs=2, kv_cache_type="f16")
    assert stats.kv_cache_bytes == est.kv_cache + est.recurrent_state
    assert est == estimate_memory(str(path), 200, "cpu", num_seqs=2, kv_cache_type="f32")


def test_the_cli_takes_kv_type_wherever_it_builds_an_engine(capsys):
    parser = cli.build_parser()
    for command in (["bench"], ["generate", "-p", "hi"], ["chat"], ["serve"]):
        assert parser.parse_args(command).kv_type == arch.DEFAULT_KV_CACHE_TYPE
        assert parser.parse_args([*command, "--kv-type", "f16"]).kv_type == "f16"
        with pytest.raises(SystemExit):
            parser.parse_args([*command, "--kv-type", "q8_0"])
    assert "invalid choice: 'q8_0'" in capsys.readouterr().err


def test_inspect_prints_the_kv_bytes_per_token_of_each_type(capsys):
    c, _ = _config("tiny-qwen3-q4_k_m")
    assert cli.main(["inspect", str(DATA / "tiny-qwen3-q4_k_m.gguf")]) == 0
    line = next(s for s in capsys.readouterr().out.splitlines() if s.startswith("memory (GPU):"))
    kv_values = 2 * 2 * c.n_head_kv * c.head_dim
    split = kv_values // 2 * 4 + c.n_head_kv                         # f32's prefill split copy: one of 2 layers
    assert f"{kv_values * 4 + 4 + split} B/token f32, {kv_values * 2 + 4} B/token f16" in line


def test_the_cpu_bench_says_it_keeps_f32(capsys):
    assert cli.main(["bench", "-m", str(DATA / "tiny-llama-q4_1.gguf"), "--prompt-tokens", "8",
                     "--decode-tokens", "2", "--kv-type", "f16"]) == 0
    err = capsys.readouterr().err
    assert "the CPU forward keeps its KV cache in f32; --kv-type f16 applies to GPU backends" in err


@pytest.mark.parametrize("name", ["tiny-qwen3-q4_k_m", "tiny-qwen35-q8_0"])
def test_the_hub_verdict_plans_the_library_estimate_of_the_chosen_type(name):
    """The Discover page's "fits this machine" (engine.hub.fit_verdict, from the header a hub serves) plans the
    load pre-flights over the model library's figure (engine.api.estimate_memory, arch.memory_estimate) with
    the KV cache type asked for: one formula for the library, the verdict and the load."""
    from engine.core.setup import DEFAULT_MAX_NUM_SEQS
    from engine.gguf import parse_header
    from engine.hub import Machine, fit_verdict
    from engine.hub.verdict import planned_needs
    from engine.model.host_memory import plan_host_memory

    path = DATA / f"{name}.gguf"
    header = parse_header(path.read_bytes(), path.stat().st_size)        # what engine.hub reads from a hub
    c, tensors = _config(name)
    ctx, blocks = 100, arch.context_blocks(c, 100)
    assert blocks == 7
    machine = Machine(ram_free=64 << 30, gpu_free=24 << 30, gpu_name="Test GPU")
    needs = {}
    for kv in arch.KV_CACHE_TYPES:
        est = estimate_memory(str(path), ctx, "gpu", kv_cache_type=kv)
        plan = preflight.plan_memory(c, tensors, blocks, arch.BLOCK_SIZE, 64, DEFAULT_MAX_NUM_SEQS, kv)
        assert plan.weights + plan.kv == est.total                              # the library's figure, then
        assert plan.scratch > 0 and plan.reserve >= preflight.FIXED_RESERVE     # what the load adds to it
        host = plan_host_memory(c, tensors, blocks, arch.BLOCK_SIZE, 64, DEFAULT_MAX_NUM_SEQS)
        assert host.weights + host.kv == estimate_memory(str(path), ctx, "cpu", kv_cache_type=kv).total
        verdict = fit_verdict(header, machine, ctx, kv)
        needs[kv] = (verdict.gpu_bytes, verdict.cpu_bytes)
        assert needs[kv] == planned_needs(c, tensors, ctx, kv)
        assert verdict.fit == "gpu" and "At a 100-token context" in verdict.words
    assert "the GPU's KV cache in f16" in fit_verdict(header, machine, ctx, "f16").words
    assert "KV cache" not in fit_verdict(header, machine, ctx).words       # the default f32 goes unsaid
    assert fit_verdict(header, machine, ctx).gpu_bytes == needs["f32"][0]   # the default is exact f32
    # f16 halves K and V on the GPU (the plan's reserve is a share of the rest); the CPU keeps f32
    f32, f16 = (estimate_memory(str(path), ctx, "gpu", kv_cache_type=kv).kv_cache for kv in ("f32", "f16"))
    saved = needs["f32"][0] - needs["f16"][0]
    assert f32 - f16 <= saved <= (f32 - f16) * (1 + preflight.RESERVE_FRACTION) + 1
    assert needs["f32"][1] == needs["f16"][1]
