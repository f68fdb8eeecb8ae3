"""ModelConfig.from_metadata: architecture facts and validation of hostile hyperparameters."""
import math

import numpy as np
import pytest

from engine.errors import InvalidModelError, UnsupportedModelError
from engine.model.config import ModelConfig
from engine.model.step import KVCache, SequenceBlocks


def meta(arch="llama", **over):
    m = {
        "general.architecture": arch,
        f"{arch}.block_count": 12,
        f"{arch}.embedding_length": 64,
        f"{arch}.attention.head_count": 4,
        f"{arch}.attention.head_count_kv": 2,
        f"{arch}.feed_forward_length": 128,
        f"{arch}.context_length": 2048,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.freq_base": 10000.0,
        "tokenizer.ggml.tokens": ["a"] * 100,
    }
    for k, v in over.items():
        m[f"{arch}.{k}"] = v
    return m


def test_llama_defaults():
    c = ModelConfig.from_metadata(meta())
    assert (c.head_dim, c.n_group, c.vocab_size, c.rope_dim) == (16, 2, 100, 16)
    assert c.rope_style == "normal" and c.activation == "silu" and c.embed_scale == 1.0
    assert c.attn_scale == pytest.approx(0.25) and not any(c.sliding_layers)
    assert not (c.has_qkv_bias or c.has_qk_norm or c.has_post_norms)


def test_gemma3_every_sixth_layer_is_global_with_its_own_rope_base():
    c = ModelConfig.from_metadata(meta("gemma3", **{"attention.key_length": 32, "attention.value_length": 32,
                                                    "attention.sliding_window": 512, "rope.freq_base": 1e6}))
    assert [i for i, s in enumerate(c.sliding_layers) if not s] == [5, 11]
    assert c.rope_theta[0] == 10000.0 and c.rope_theta[5] == 1e6
    assert c.head_dim == 32 and c.attn_scale == pytest.approx(1 / math.sqrt(32))
    assert c.embed_scale == pytest.approx(8.0) and c.activation == "gelu_tanh"
    assert c.rope_style == "neox" and c.has_qk_norm and c.has_post_norms


def test_gemma3_linear_rope_scaling_applies_to_global_layers_only():
    c = ModelConfig.from_metadata(meta("gemma3", **{"attention.sliding_window": 512, "rope.scaling.type": "linear",
                                                    "rope.scaling.factor": 8.0}))
    assert c.rope_freq_scale[5] == 0.125 and c.rope_freq_scale[0] == 1.0


def test_qwen_families():
    q2 = ModelConfig.from_metadata(meta("qwen2"))
    q3 = ModelConfig.from_metadata(meta("qwen3", **{"attention.key_length": 32}))
    assert q2.has_qkv_bias and not q2.has_qk_norm and q2.rope_style == "neox"
    assert q3.has_qk_norm and not q3.has_qkv_bias and q3.head_dim == 32 and q3.q_dim == 128


def test_unsupported_architecture_is_named_with_the_supported_list():
    with pytest.raises(UnsupportedModelError, match="'mamba'.*llama, gemma3, qwen2, qwen3"):
        ModelConfig.from_metadata(meta("mamba"))


@pytest.mark.parametrize("key, value, field", [
    ("attention.head_count", 0, "head_count"),
    ("attention.head_count_kv", 0, "head_count_kv"),
    ("attention.head_count_kv", 3, "head_count_kv"),     # 4 heads are not a multiple of 3
    ("attention.head_count", 5, "head_count"),           # 64 % 5 != 0 and no key_length
    ("context_length", 0, "context_length"),
    ("context_length", 1 << 40, "context_length"),
    ("block_count", -1, "block_count"),
    ("attention.layer_norm_rms_epsilon", float("nan"), "epsilon"),
    ("rope.freq_base", -1.0, "freq_base"),
    ("embedding_length", "64", "embedding_length"),
])
def test_bad_hyperparameters_are_invalid_model_errors(key, value, field):
    with pytest.raises(InvalidModelError, match=field):
        ModelConfig.from_metadata(meta(**{key: value}))


def test_missing_required_key():
    m = meta()
    del m["llama.embedding_length"]
    with pytest.raises(InvalidModelError, match="embedding_length is missing"):
        ModelConfig.from_metadata(m)


def test_uniform_per_layer_array_is_accepted_and_varying_one_refused():
    assert ModelConfig.from_metadata(meta(**{"attention.head_count_kv": np.array([2] * 12)})).n_head_kv == 2
    with pytest.raises(UnsupportedModelError):
        ModelConfig.from_metadata(meta(**{"attention.head_count_kv": [2, 4] * 6}))


def test_sequence_blocks_lay_positions_out_linearly():
    c = ModelConfig.from_metadata(meta())
    kv = KVCache.allocate(c, num_blocks=4, block_size=16)
    seq = SequenceBlocks(kv)
    first = seq.step(list(range(20)))
    assert first.slot_mapping.tolist() == list(range(20)) and first.block_tables.tolist() == [[0, 1]]
    assert first.logits_indices.tolist() == [19] and first.seq_lens.tolist() == [20]
    second = seq.step([7])
    assert second.positions.tolist() == [20] and second.query_start_loc.tolist() == [0, 1]
    with pytest.raises(ValueError, match="exceeds the cache"):
        seq.step(list(range(44)))
