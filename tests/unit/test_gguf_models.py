"""Our parser and dequantizers on the two real models, against the gguf package (reader and quants)."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, quants
from gguf.constants import GGMLQuantizationType

from engine.gguf import BLOCK_LAYOUT, GGMLType, dequantize, open_gguf

pytestmark = pytest.mark.golden
SAMPLE_BLOCKS = 2048     # per tensor, from each end, in the quick dequantize comparison


def assert_same_as_reader(path, keys=None) -> None:
    """Every metadata value (or those in `keys`) and every tensor info equals what GGUFReader reads."""
    reader = GGUFReader(path)
    with open_gguf(path) as ours:
        reader_keys = [k for k in reader.fields if not k.startswith("GGUF.")]   # the reader's header pseudo-fields
        assert list(ours.metadata) == reader_keys
        assert ours.data_offset == reader.data_offset and ours.alignment == reader.alignment
        for key in keys if keys is not None else reader_keys:
            field = reader.fields[key]
            expected, value = field.contents(), ours.metadata[key]
            if field.types[0] == GGUFValueType.ARRAY and field.types[-1] != GGUFValueType.STRING:
                assert isinstance(value, np.ndarray) and value.tolist() == list(expected), key
            elif field.types[0] in (GGUFValueType.FLOAT32,):
                assert np.float32(value) == np.float32(expected), key
            else:
                assert value == expected, key
        assert list(ours.tensors) == [t.name for t in reader.tensors]
        for t in reader.tensors:
            info = ours.tensors[t.name]
            assert int(info.ggml_type) == int(t.tensor_type), t.name
            assert info.ne == tuple(int(d) for d in t.shape), t.name
            assert info.shape == tuple(reversed(info.ne))
            assert (info.n_elements, info.nbytes, info.offset) == (t.n_elements, t.n_bytes, t.data_offset), t.name
            assert np.array_equal(ours.raw(t.name), np.asarray(t.data).reshape(-1).view(np.uint8)), t.name


def assert_tensors_match_oracle(path, sample: bool) -> set[str]:
    """Dequantize every tensor (or both ends of it) with ours and with gguf.quants; bit-exact."""
    seen = set()
    with open_gguf(path) as g:
        for name, info in g.tensors.items():
            seen.add(info.ggml_type.name)
            raw = g.raw(name)
            if sample:
                block_size, block_bytes = BLOCK_LAYOUT[info.ggml_type]
                n_blocks = info.n_elements // block_size
                if n_blocks > 2 * SAMPLE_BLOCKS:
                    blocks = raw.reshape(n_blocks, block_bytes)
                    raw = np.concatenate([blocks[:SAMPLE_BLOCKS], blocks[-SAMPLE_BLOCKS:]]).reshape(-1)
                ours = dequantize(raw, info.ggml_type, raw.size // block_bytes * block_size)
            else:
                ours = g.dequantize(name)
                assert ours.shape == info.shape and ours.dtype == np.float32
            expected = quants.dequantize(raw, GGMLQuantizationType(int(info.ggml_type))).reshape(-1)
            assert np.array_equal(ours.reshape(-1).view(np.uint32), expected.astype(np.float32).view(np.uint32)), name
    return seen


def test_smollm2_matches_gguf_reader(smollm2_path):
    assert_same_as_reader(smollm2_path)


@pytest.mark.slow
def test_gemma_matches_gguf_reader_fully(gemma_path):
    assert_same_as_reader(gemma_path)     # ~25 s: the reader builds 262k string fields one by one


def test_gemma_known_values(gemma_path):
    with open_gguf(gemma_path) as g:
        assert g.metadata["general.architecture"] == "gemma3"
        tokens = g.metadata["tokenizer.ggml.tokens"]
        assert len(tokens) == 262144 and tokens[:4] == ["<pad>", "<eos>", "<bos>", "<unk>"]
        assert g.metadata["tokenizer.ggml.scores"].shape == (262144,)
        assert g.metadata["tokenizer.ggml.token_type"].dtype == np.int32
        assert g.metadata["gemma3.attention.key_length"] == 256
        embd = g.tensors["token_embd.weight"]
        assert embd.shape == (262144, 640) and embd.ne == (640, 262144)
        # tensors are packed: the last one ends within one alignment of the end of the file
        last = max(g.tensors.values(), key=lambda t: t.offset)
        assert g.file_size - g.alignment < last.offset + last.nbytes <= g.file_size


def test_smollm2_tensors_match_oracle_sampled(smollm2_path):
    assert assert_tensors_match_oracle(smollm2_path, sample=True) == {"F32", "Q4_1", "Q8_0"}


def test_gemma_tensors_match_oracle_sampled(gemma_path):
    assert assert_tensors_match_oracle(gemma_path, sample=True) == {"F32", "Q5_0", "Q4_K", "Q8_0", "Q6_K"}


@pytest.mark.slow
@pytest.mark.parametrize("which", ["smollm2_path", "gemma_path"])
def test_whole_models_match_oracle(which, request):
    assert_tensors_match_oracle(request.getfixturevalue(which), sample=False)


def test_dequantize_keeps_numpy_shape(smollm2_path):
    with open_gguf(smollm2_path) as g:
        info = g.tensors["blk.0.attn_q.weight"]
        assert info.ggml_type == GGMLType.Q4_1 and info.shape == (576, 576)
        k = g.dequantize("blk.0.attn_k.weight")
        assert k.shape == (192, 576)        # [n_kv_heads * head_dim, n_embd]: rows are output features
