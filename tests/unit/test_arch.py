"""engine.model.arch: the one schema. Specs cover every tensor of real files; the memory figures of the GPU
pre-flight, the CPU cache sizing and the app's library estimate are the same formula."""
from pathlib import Path

import pytest

from app.library import inspect_model
from engine.gguf import open_gguf
from engine.gpu.preflight import kv_bytes, plan_memory, weight_bytes
from engine.model import arch
from engine.model.config import ModelConfig
from engine.model.loader import load_model
from engine.model.step import KVCache

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
NAMES = sorted(p.stem for p in DATA.glob("tiny-*.gguf"))


@pytest.mark.parametrize("name", NAMES)
def test_specs_name_every_tensor_of_the_file(name):
    with open_gguf(DATA / f"{name}.gguf") as g:
        config = ModelConfig.from_metadata(g.metadata)
        specs = list(arch.global_tensor_specs(config))
        for i in range(config.n_layers):
            specs += arch.layer_tensor_specs(config, i)
        named = {s.name for s in specs}
        assert set(g.tensors) <= named
        for s in specs:
            if s.name in g.tensors:
                assert tuple(g.tensors[s.name].shape) == s.shape
            else:
                assert not s.required, s.name


@pytest.mark.parametrize("name", ["tiny-qwen3-q4_k_m", "tiny-gemma3-f32"])
def test_memory_figures_come_from_one_formula(name):
    path = DATA / f"{name}.gguf"
    with open_gguf(path) as g:
        config = ModelConfig.from_metadata(g.metadata)
        tensors = list(g.tensors.values())
        est = arch.memory_estimate(config, 100, "gpu", tensors)
        assert est.weights == weight_bytes(tensors)
        assert est.kv_cache == kv_bytes(config, 7, arch.BLOCK_SIZE)        # ceil(100 / 16) = 7 blocks
        cpu = arch.memory_estimate(config, 100, "cpu", tensors)
        assert cpu.weights == load_model(path).weights.nbytes       # what the CPU loader holds
    kv = KVCache.allocate(config, 7)
    assert kv.nbytes == cpu.kv_cache and kv.block_size == arch.BLOCK_SIZE
    entry = inspect_model(path)
    assert entry.memory_estimate(112) == arch.memory_estimate(config, 112, "gpu", tensors).total   # 7 blocks
    # capped at the trained length
    assert arch.memory_estimate(config, 10**9, "gpu", tensors).kv_cache == arch.kv_cache_bytes(
        config, -(-config.context_length // arch.BLOCK_SIZE), backend="gpu")


def test_the_recurrent_state_is_counted_wherever_memory_is_planned():
    """Qwen3.5's per-sequence recurrent state (conv + delta-rule state of each Gated DeltaNet layer): the CPU
    cache allocates what the formula says, and the CPU and GPU pre-flights and the estimate count it per
    sequence. The tiny model: 3 DeltaNet layers, conv 4 over 2*2*16 + 4*16 = 128 channels, 4 value heads of
    16 x 16."""
    from engine.model.host_memory import plan_host_memory

    with open_gguf(DATA / "tiny-qwen35-q8_0.gguf") as g:
        config = ModelConfig.from_metadata(g.metadata)
        tensors = list(g.tensors.values())
    per_seq = 3 * 4 * ((4 - 1) * 128 + 4 * 16 * 16)
    assert arch.recurrent_state_bytes(config) == per_seq
    kv = arch.kv_cache_bytes(config, 7, arch.BLOCK_SIZE, "cpu")
    assert kv == 7 * arch.BLOCK_SIZE * 2 * 1 * config.kv_dim * 4            # one attention layer holds K/V
    assert KVCache.allocate(config, 7, state_slots=3).nbytes == kv + 3 * per_seq
    assert plan_host_memory(config, tensors, 7, arch.BLOCK_SIZE, 64, 3).kv == kv + 3 * per_seq
    assert plan_memory(config, tensors, 7, arch.BLOCK_SIZE, 64, 3).kv == kv_bytes(config, 7, arch.BLOCK_SIZE) \
        + 3 * per_seq
    est = arch.memory_estimate(config, 112, "cpu", tensors, num_seqs=3)
    assert est.kv_cache == kv and est.recurrent_state == 3 * per_seq
