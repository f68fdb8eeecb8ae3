"""load_weights: fused layouts, tied output, and refusal of missing, misshapen or non-finite tensors.
The input is a small in-memory stand-in for a parsed GGUF file (names -> arrays)."""
from types import SimpleNamespace

import numpy as np
import pytest

from engine.errors import InvalidModelError
from engine.model.config import ModelConfig
from engine.model.weights import load_weights

META = {"general.architecture": "qwen2", "qwen2.block_count": 2, "qwen2.embedding_length": 8,
        "qwen2.attention.head_count": 2, "qwen2.attention.head_count_kv": 1, "qwen2.feed_forward_length": 12,
        "qwen2.context_length": 64, "qwen2.vocab_size": 10}


class ArrayFile:
    def __init__(self, arrays: dict[str, np.ndarray]):
        self.arrays = arrays
        self.tensors = {n: SimpleNamespace(name=n, shape=a.shape, nbytes=a.nbytes) for n, a in arrays.items()}

    def dequantize(self, name):
        return self.arrays[name]


def tensors(config: ModelConfig, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    c = config
    t = {"token_embd.weight": (c.vocab_size, c.n_embd), "output_norm.weight": (c.n_embd,)}
    for i in range(c.n_layers):
        t |= {f"blk.{i}.attn_norm.weight": (c.n_embd,), f"blk.{i}.attn_q.weight": (c.q_dim, c.n_embd),
              f"blk.{i}.attn_k.weight": (c.kv_dim, c.n_embd), f"blk.{i}.attn_v.weight": (c.kv_dim, c.n_embd),
              f"blk.{i}.attn_q.bias": (c.q_dim,), f"blk.{i}.attn_k.bias": (c.kv_dim,),
              f"blk.{i}.attn_v.bias": (c.kv_dim,), f"blk.{i}.attn_output.weight": (c.n_embd, c.q_dim),
              f"blk.{i}.ffn_norm.weight": (c.n_embd,), f"blk.{i}.ffn_gate.weight": (c.n_ff, c.n_embd),
              f"blk.{i}.ffn_up.weight": (c.n_ff, c.n_embd), f"blk.{i}.ffn_down.weight": (c.n_embd, c.n_ff)}
    return {n: rng.normal(size=s).astype(np.float32) for n, s in t.items()}


@pytest.fixture
def config():
    return ModelConfig.from_metadata(META)


def test_fused_layouts_and_tied_output(config):
    t = tensors(config)
    progress = []
    w = load_weights(ArrayFile(t), config, lambda f, m: progress.append(f))
    layer = w.layers[1]
    np.testing.assert_array_equal(layer.wqkv, np.concatenate([t["blk.1.attn_q.weight"], t["blk.1.attn_k.weight"],
                                                               t["blk.1.attn_v.weight"]]))
    np.testing.assert_array_equal(layer.bqkv[: config.q_dim + config.kv_dim], np.concatenate([t["blk.1.attn_q.bias"],
                                                                          t["blk.1.attn_k.bias"]]))
    np.testing.assert_array_equal(layer.w_gate_up[: config.n_ff], t["blk.1.ffn_gate.weight"])
    assert w.output is w.token_embd                      # tied: no copy
    assert not layer.wqkv.flags.writeable and progress[-1] == 1.0


def test_separate_output_head_is_used(config):
    t = tensors(config)
    t["output.weight"] = np.ones((config.vocab_size, config.n_embd), np.float32)
    w = load_weights(ArrayFile(t), config)
    assert w.output is not w.token_embd and w.output.sum() == config.vocab_size * config.n_embd


@pytest.mark.parametrize("damage, match", [
    (lambda t: t.pop("blk.1.ffn_up.weight"), "blk.1.ffn_up.weight is missing"),
    (lambda t: t.update({"blk.0.attn_k.weight": np.zeros((8, 8), np.float32)}), "blk.0.attn_k.weight has shape"),
    (lambda t: t.pop("blk.0.attn_q.bias"), "blk.0.attn_q.bias is missing"),
    (lambda t: t["blk.0.ffn_down.weight"].__setitem__((0, 0), np.nan), "NaN"),
])
def test_bad_tensors_are_named(config, damage, match):
    t = tensors(config)
    damage(t)
    with pytest.raises(InvalidModelError, match=match):
        load_weights(ArrayFile(t), config)


def test_rope_freq_factors_divide_the_rotation_frequencies(config):
    from engine.model.cpu_forward import CpuModel
    from engine.model.step import KVCache, SequenceBlocks

    t = tensors(config)
    plain = CpuModel(config, load_weights(ArrayFile(t), config))
    ones = CpuModel(config, load_weights(ArrayFile(t | {"rope_freqs.weight": np.ones(2, np.float32)}), config))
    slow = CpuModel(config, load_weights(ArrayFile(t | {"rope_freqs.weight": np.full(2, 4.0, np.float32)}), config))
    np.testing.assert_allclose(slow._ropes[(10000.0, 1.0)].inv_freq, plain._ropes[(10000.0, 1.0)].inv_freq / 4)

    def logits(model):
        kv = KVCache.allocate(config, 2, 16)
        return model.forward(SequenceBlocks(kv).step([1, 2, 3, 4, 5]), kv)

    np.testing.assert_array_equal(logits(plain), logits(ones))
    assert not np.allclose(logits(plain), logits(slow))
    with pytest.raises(InvalidModelError, match="rope_freqs"):
        load_weights(ArrayFile(t | {"rope_freqs.weight": np.zeros(2, np.float32)}), config)


def test_cpu_and_gpu_rotate_by_the_one_rope_function(config):
    """Both forward passes take their rotary frequencies from engine.model.arch.rope_inv_freq."""
    from engine.gpu.weights import rope_tables
    from engine.model.arch import rope_inv_freq
    from engine.model.cpu_forward import CpuModel

    factors = np.array([1.0, 3.0], np.float32)
    model = CpuModel(config, load_weights(ArrayFile(tensors(config) | {"rope_freqs.weight": factors}), config))
    table = rope_inv_freq(config, factors)
    assert table.shape == (config.n_layers, config.rope_dim // 2)
    np.testing.assert_array_equal(rope_tables(config, factors), table)
    for i, rope in enumerate(model.layer_rope):
        np.testing.assert_array_equal(rope.inv_freq, table[i])
    np.testing.assert_allclose(table[0], 10000.0 ** (-np.arange(2) / 2) / factors)


def test_the_numpy_path_holds_float32_when_asked(tmp_path):
    """HALO_CPU_KERNELS=numpy (or numba missing): every matrix is dequantized to float32, as the reference."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    child = ("from pathlib import Path; import numpy as np\n"
             "from engine.model.quant_matrix import describe_kernels, kernel_path\n"
             "from engine.model.loader import load_model\n"
             "lm = load_model(Path('tests/golden/data/tiny-llama-q4_1.gguf'))\n"
             "layer = lm.weights.layers[0]\n"
             "assert kernel_path() == 'numpy' and 'HALO_CPU_KERNELS=numpy' in describe_kernels()\n"
             "assert all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in "
             "(lm.weights.token_embd, layer.wqkv, layer.wo, layer.w_gate_up, layer.w_down))\n"
             "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", child], cwd=root, capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, HALO_CPU_KERNELS="numpy"))
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr


@pytest.mark.parametrize("path", ["cpu", "gpu"])
def test_a_quantized_matrix_with_an_inf_scale_is_refused_at_load(tmp_path, path):
    """Matrices kept as the file stores them (the CPU's quantized kernels, every GPU upload) are never decoded
    at load; one inf block scale must still refuse the model, naming the tensor, as a float32 tensor is."""
    from pathlib import Path

    from engine.gguf import open_gguf

    src = Path(__file__).resolve().parents[1] / "golden" / "data" / "tiny-llama-q4_1.gguf"
    bad = tmp_path / "inf-scale.gguf"
    data = bytearray(src.read_bytes())
    with open_gguf(src) as g:
        info = g.tensors["blk.1.ffn_up.weight"]
    assert info.ggml_type.name == "Q4_1"
    at = info.offset + 5 * 20                     # offsets are in the file; Q4_1: 20-byte blocks, d first
    data[at:at + 2] = np.float16(np.inf).tobytes()
    bad.write_bytes(bytes(data))
    if path == "cpu":
        from engine.model.loader import load_model
        with pytest.raises(InvalidModelError, match="blk.1.ffn_up.weight holds NaN or infinite"):
            load_model(bad)
    else:
        from engine.backends import registry
        from engine.backends.base import Kernel
        from engine.gpu.model import GpuModel
        backend = registry.create("cpu")                # host logic: kernels recorded, not run
        backend.kernel = lambda file, function: Kernel(function, None)
        backend.launch = lambda *a, **k: None
        with pytest.raises(InvalidModelError, match="blk.1.ffn_up.weight holds NaN or infinite"):
            GpuModel.load(bad, backend, max_tokens=16, max_seqs=2, kv_blocks=2)
    from engine.model.loader import load_model
    assert load_model(src).config.n_layers >= 2       # the untouched file passes the same check
