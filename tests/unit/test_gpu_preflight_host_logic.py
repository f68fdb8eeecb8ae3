"""The GPU forward's host side on the CPU backend, kernels recorded instead of run (no GPU here): every tiny
model loads through the pre-flight and upload, each step packs and copies its metadata, every kernel gets
only DeviceBuffers and width-explicit numpy scalars, and a decode step costs 8 launches per layer + 3.
Numerics are checked against the CPU forward on a real GPU (tests/gpu/test_gpu_forward.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import engine.gpu.forward as fwd_mod
from engine.backends import registry
from engine.backends.async_output import ReadbackPool
from engine.backends.base import DeviceBuffer, Kernel
from engine.gpu.model import GpuModel
from engine.model.step import StepInput
from tests.gpu import gpu_tiny_names

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
NAMES = gpu_tiny_names(DATA)


def _step(ids, start):
    pos = np.arange(start, start + len(ids), dtype=np.int32)
    return StepInput(token_ids=np.asarray(ids, np.int32), positions=pos, slot_mapping=pos.astype(np.int64),
                     query_start_loc=np.array([0, len(ids)], np.int32), seq_lens=np.array([start + len(ids)], np.int32),
                     block_tables=np.arange(4, dtype=np.int32)[None, :])


@pytest.mark.parametrize("name", NAMES)
def test_host_side_of_a_prefill_and_a_decode_step(name):
    backend = registry.create("cpu")
    launched = []

    def record(kernel, grid, block, args, stream, shared_bytes=0):
        bad = [a for a in args if not isinstance(a, (DeviceBuffer, np.generic))]
        assert not bad, (kernel.name, bad)
        assert all(not a.freed for a in args if isinstance(a, DeviceBuffer))
        launched.append(kernel.name)

    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = record
    m = GpuModel.load(DATA / f"{name}.gguf", backend, max_tokens=32, max_seqs=4, kv_blocks=4)
    kv = m.new_kv_cache(4, 16)
    pool = ReadbackPool(backend, slots=3)
    try:
        logits = m.forward(_step(list(range(10)), 0), kv)
        assert logits.shape == (1, m.config.vocab_size)
        launched.clear()
        out = m.step(_step([3], 10), kv, pool, ids_on_device=True, feed_next=True).get_output()
        assert out["ids"].shape == (1,)
        per_layer = 10 if m.config.ffn_kind == "moe" else 8      # MoE: router, route, glu, down for glu, down
        n_attention = sum(kind != "linear_attention" for kind in m.config.layer_kinds)
        n_linear = m.config.n_layers - n_attention
        if m.config.has_recurrent_state:
            # gated attention: q|gate, k|v matmuls, q split, rope, attention, output gate, wo + 4 of the FFN;
            # linear (a decode step: the recurrent delta rule only): qkv, z, beta|alpha matmuls, conv, prep,
            # delta rule, gated norm, ssm_out + 4 of the FFN
            per_layer = 11
        # split-KV attention merges its chunks in a launch of its own, or (HALO_SKV_FUSED=1) in the split kernel
        split_merges = n_attention if m.fwd.split_kv and not fwd_mod.SKV_FUSED else 0
        assert len(launched) == per_layer * m.config.n_layers + n_linear * (m.config.has_recurrent_state) \
            + split_merges + 3
        assert launched[0] == "halo_embed_norm" and launched[-1] == "halo_sample"
        assert m.fwd.w.nbytes < 2 * (DATA / f"{name}.gguf").stat().st_size    # still quantized on the device
    finally:
        pool.close()
        kv.free()
        m.close()


@pytest.mark.parametrize("kv_type", ["f32", "f16"])
@pytest.mark.parametrize("name", NAMES)
def test_the_gpu_kv_cache_allocates_what_the_one_formula_estimates(name, kv_type):
    """What the engine reports as allocated (Engine.stats().kv_cache_bytes reads GpuKVCache.nbytes) equals
    engine.model.arch's estimate on the GPU: K and V of `kv_type` plus the token id at every slot, plus (hybrid
    models) the recurrent state of every state slot (max_seqs by default)."""
    from engine.model.arch import flash_usable, kv_cache_bytes, recurrent_state_bytes

    backend = registry.create("cpu")
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda *a, **k: None
    m = GpuModel.load(DATA / f"{name}.gguf", backend, max_tokens=32, max_seqs=4, kv_blocks=6, kv_type=kv_type)
    kv = m.new_kv_cache(6, 16, kv_type=kv_type)
    try:
        assert kv.kv_type == kv_type
        assert kv.nbytes == kv_cache_bytes(m.config, 6, 16, "gpu", kv_type) + 4 * recurrent_state_bytes(m.config)
        assert m.plan.kv == kv.nbytes                          # the load's pre-flight counted this type
        recurrent = kv.recurrent.storage.nbytes if kv.recurrent else 0
        assert (recurrent > 0) == m.config.has_recurrent_state
        split = kv.split.nbytes if kv.split is not None else 0     # a float32 cache's prefill split copy
        assert (split > 0) == (kv_type == "f32" and flash_usable(m.config))   # only for heads the tile takes
        assert kv.nbytes == kv.storage.nbytes + kv.token_at_slot.nbytes + recurrent + split
    finally:
        kv.free()
        m.close()


@pytest.mark.parametrize("name", [n for n in NAMES if "moe" in n or "gptoss" in n])
@pytest.mark.parametrize("max_tokens", [1, 7, 512])
def test_the_moe_scratch_allocates_what_the_preflight_counts(name, max_tokens):
    """MoeScratch.nbytes (the load's pre-flight) is exactly what MoeScratch allocates for `max_tokens`, its tile
    list included (engine.gpu.moe.max_tiles, the tensor-core kernels' bound on tiles of a step)."""
    from engine.gguf.file import open_gguf
    from engine.gpu.moe import MoeScratch
    from engine.model.config import ModelConfig

    backend = registry.create("cpu")
    with open_gguf(DATA / f"{name}.gguf") as gguf:
        config = ModelConfig.from_metadata(gguf.metadata)
    scratch = MoeScratch(backend, config, max_tokens)
    try:
        assert sum(b.nbytes for b in scratch.buffers) == MoeScratch.nbytes(config, max_tokens)
    finally:
        for b in scratch.buffers:
            backend.free(b)


def test_the_engines_gpu_builder_allocates_and_runs_the_kv_type_it_is_given(monkeypatch):
    """engine.gpu.executor.build_gpu_model (what Engine.load runs for a GPU backend) on the CPU backend, kernels
    recorded: the pre-flight and the cache are f16, a step launches the f16 builds, ModelInfo says "f16", and
    what the runner reports as allocated (Engine.stats().kv_cache_bytes) is the app's estimate for f16."""
    from engine.api import estimate_memory
    from engine.backends.cpu import CpuBackend
    from engine.core.setup import BackendChoice
    from engine.gpu.executor import build_gpu_model
    from engine.gpu.preflight import kv_bytes
    from engine.model.arch import recurrent_state_bytes

    launched = []
    monkeypatch.setattr(CpuBackend, "kernel", lambda self, file, function: Kernel(function, None))
    monkeypatch.setattr(CpuBackend, "launch", lambda self, kernel, *a, **k: launched.append(kernel.name))
    path = DATA / "tiny-qwen35-q8_0.gguf"                 # hybrid: the recurrent state is counted too
    sizes = {}
    for kv_type in ("f32", "f16"):
        built = build_gpu_model(path, BackendChoice("cpu", "test", False, "test"), None, max_context=200,
                                max_num_seqs=2, prefill_chunk=32, kv_cache_tokens=None, kv_cache_type=kv_type)
        runner = built.core.runner
        m, kv = runner.executor.model, runner.executor.kv
        try:
            assert built.info.kv_cache_type == kv.kv_type == kv_type
            blocks = -(-200 // 16)
            assert m.plan.kv == kv_bytes(m.config, blocks, 16, kv_type) + 2 * recurrent_state_bytes(m.config)
            est = estimate_memory(str(path), 200, "gpu", num_seqs=2, kv_cache_type=kv_type)
            assert runner.kv_cache_bytes == est.kv_cache + est.recurrent_state == kv.nbytes
            sizes[kv_type] = est.kv_cache
            launched.clear()
            m.forward(_step(list(range(10)), 0), kv)
            rope = [n for n in launched if n.startswith("halo_rope_kv")]
            assert rope == ["halo_rope_kv" + ("_f16" if kv_type == "f16" else "")] * m.config.layer_kinds.count(
                "attention")
        finally:
            built.core.close()
    slots = -(-200 // 16) * 16
    # one attention layer's K and V at 4 - 2 bytes, and f32's prefill split copy (K and V as f16 heads and tails, a
    # float4 of factors per 16 slots and kv head)
    split = 2 * m.config.kv_dim * 4 + m.config.n_head_kv
    assert sizes["f32"] - sizes["f16"] == slots * (2 * m.config.kv_dim * 2 + split)


def test_a_gpu_that_holds_the_model_only_with_shorter_prefill_steps_gets_them(monkeypatch):
    """build_gpu_model without a prefill chunk (the Engine's default) on a device whose free memory is set: the GPU's
    default step where its plan fits, else the step halved until it fits (down to GPU_PREFILL_CHUNK_FLOOR), the
    scheduler's budget and the model's scratch both planned for that step; below the floor's plan, the refusal that
    names the figures, as before the step grew."""
    from engine.backends.base import MemoryInfo
    from engine.backends.cpu import CpuBackend
    from engine.core.setup import DEFAULT_PREFILL_CHUNK, GPU_PREFILL_CHUNK_FLOOR, BackendChoice
    from engine.errors import OutOfDeviceMemoryError
    from engine.gguf import open_gguf
    from engine.gpu.executor import build_gpu_model
    from engine.gpu.preflight import plan_memory
    from engine.model.config import ModelConfig

    monkeypatch.setattr(CpuBackend, "kernel", lambda self, file, function: Kernel(function, None))
    monkeypatch.setattr(CpuBackend, "launch", lambda self, kernel, *a, **k: None)
    path, seqs, blocks = DATA / "tiny-llama-q4_1.gguf", 2, -(-200 // 16)
    with open_gguf(path) as gguf:
        config, tensors = ModelConfig.from_metadata(gguf.metadata), list(gguf.tensors.values())
    plan = {c: plan_memory(config, tensors, blocks, 16, c, seqs) for c in (2048, 1024, 512, 256)}
    assert DEFAULT_PREFILL_CHUNK["gpu"] == 2048 and GPU_PREFILL_CHUNK_FLOOR == 256
    assert plan[2048].total > plan[1024].total > plan[256].total          # the scratch grows with the step

    def build(free: int):
        monkeypatch.setattr(CpuBackend, "memory_info", lambda self: MemoryInfo(free, 1 << 40))
        return build_gpu_model(path, BackendChoice("cpu", "test", False, "test"), None, max_context=200,
                               max_num_seqs=seqs, prefill_chunk=None, kv_cache_tokens=None)

    for free, step in ((1 << 40, 2048), ((plan[2048].total + plan[1024].total) // 2, 1024), (plan[256].total, 256)):
        built = build(free)
        try:
            assert built.core.scheduler.config.max_num_batched_tokens == built.info.prefill_chunk == step
            assert built.core.runner.executor.model.plan == plan[step]
            assert ("shortened from 2,048 tokens" in built.info.prefill_note) == (step < 2048)    # the app shows it
        finally:
            built.core.close()
    with pytest.raises(OutOfDeviceMemoryError, match="needs .* MiB of device memory"):
        build(plan[256].total - 1)
