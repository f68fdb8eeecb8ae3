"""Dequantizers against the oracle (gguf.quants.dequantize), bit for bit, for every supported type."""
from __future__ import annotations

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from engine.errors import UnsupportedModelError
from engine.gguf import BLOCK_LAYOUT, GGMLType, dequantize
from engine.gguf.dequant import DECODERS, F16_SCALE_OFFSETS, decodes_finite

SUPPORTED = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
             "MXFP4"]

# byte offsets of the f16 scale fields inside one block, per type (the engine's table; checked against the
# gguf package's decoder by test_decodes_finite_agrees_with_the_decoded_values)
SCALE_FIELDS = {t.name: offsets for t, offsets in F16_SCALE_OFFSETS.items()} | {"MXFP4": ()}


def random_blocks(type_name: str, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random bytes with every f16 scale replaced by a sane finite value (and floats kept finite)."""
    block_size, block_bytes = BLOCK_LAYOUT[GGMLType[type_name]]
    if type_name in ("F32", "F16", "BF16"):
        values = rng.standard_normal(n_blocks).astype(np.float32) * 3
        if type_name == "F32":
            return values.view(np.uint8).copy()
        if type_name == "F16":
            return values.astype("<f2").view(np.uint8).copy()
        return (values.view(np.uint32) >> 16).astype("<u2").view(np.uint8).copy()
    blocks = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if type_name == "MXFP4":           # e8m0 exponent byte: the subnormal cases 0 and 1 included, no overflow
        blocks[:, 0] = rng.integers(0, 200, n_blocks)
        blocks[:4, 0] = [0, 1, 2, 127]
    for at in SCALE_FIELDS[type_name]:
        scales = (rng.standard_normal(n_blocks) * 0.05).astype("<f2")
        blocks[:, at:at + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(-1)


def oracle(raw: np.ndarray, type_name: str) -> np.ndarray:
    return quants.dequantize(raw, GGMLQuantizationType[type_name]).astype(np.float32).reshape(-1)


def assert_bit_exact(ours: np.ndarray, expected: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ours.shape == expected.shape
    mismatch = np.flatnonzero(ours.view(np.uint32) != expected.view(np.uint32))
    assert mismatch.size == 0, f"{mismatch.size} values differ, first at {mismatch[0]}: " \
                               f"{ours[mismatch[0]]} vs {expected[mismatch[0]]}"


@pytest.mark.parametrize("type_name", SUPPORTED)
def test_random_valid_blocks_match_oracle(type_name):
    rng = np.random.default_rng(SUPPORTED.index(type_name))
    n_blocks = 700 if BLOCK_LAYOUT[GGMLType[type_name]][0] > 1 else 700 * 256
    raw = random_blocks(type_name, n_blocks, rng)
    ours = dequantize(raw, GGMLType[type_name], n_blocks * BLOCK_LAYOUT[GGMLType[type_name]][0])
    expected = oracle(raw, type_name)
    assert np.isfinite(ours).all()
    assert_bit_exact(ours, expected)


@pytest.mark.parametrize("type_name", SUPPORTED)
def test_arbitrary_bytes_match_oracle_including_inf_and_nan(type_name):
    block_size, block_bytes = BLOCK_LAYOUT[GGMLType[type_name]]
    raw = np.random.default_rng(7).integers(0, 256, size=300 * block_bytes, dtype=np.uint8)
    with np.errstate(all="ignore"):
        expected = oracle(raw, type_name)
    assert_bit_exact(dequantize(raw, GGMLType[type_name], 300 * block_size), expected)


def test_chunked_decoding_of_a_tensor_larger_than_one_chunk():
    from engine.gguf import dequant
    n_blocks = dequant._CHUNK_BLOCKS * 2 + 5
    raw = random_blocks("Q4_K", n_blocks, np.random.default_rng(1))
    assert_bit_exact(dequantize(raw, GGMLType.Q4_K, n_blocks * 256), oracle(raw, "Q4_K"))


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
def test_round_trip_of_quantized_values_stays_close(type_name):
    # quantize real-looking data with the oracle; our decode must reproduce it to within a quant step
    values = np.random.default_rng(3).standard_normal((64, 256)).astype(np.float32)
    raw = quants.quantize(values, GGMLQuantizationType[type_name]).reshape(-1)
    ours = dequantize(raw, GGMLType[type_name], values.size).reshape(values.shape)
    step = np.abs(values).max() / (7 if type_name in ("Q4_0", "Q4_1") else 15)
    assert np.abs(ours - values).max() <= step


def test_layouts_match_the_gguf_package():
    for ggml_type, layout in BLOCK_LAYOUT.items():
        assert GGML_QUANT_SIZES[GGMLQuantizationType(int(ggml_type))] == layout, ggml_type.name
        assert GGMLQuantizationType(int(ggml_type)).name == ggml_type.name
    assert sorted(t.name for t in DECODERS) == sorted(SUPPORTED)


@pytest.mark.parametrize("ggml_type", [GGMLType.IQ2_XXS, GGMLType.Q8_K, GGMLType.I32, GGMLType.TQ1_0])
def test_unsupported_type_names_the_type(ggml_type):
    block_size, block_bytes = BLOCK_LAYOUT[ggml_type]
    with pytest.raises(UnsupportedModelError, match=ggml_type.name):
        dequantize(np.zeros(block_bytes, np.uint8), ggml_type, block_size)


def test_wrong_buffer_size_is_refused():
    with pytest.raises(ValueError, match="bytes"):
        dequantize(np.zeros(17, np.uint8), GGMLType.Q4_0, 32)
    with pytest.raises(ValueError, match="blocks"):
        dequantize(np.zeros(18, np.uint8), GGMLType.Q4_0, 31)


@pytest.mark.parametrize("type_name", SUPPORTED)
def test_decodes_finite_agrees_with_the_decoded_values(type_name):
    """A tensor kept quantized is refused at load when it would decode to NaN/inf, from its scale bytes alone:
    on random bytes (so about one block in 16 has an inf/NaN scale), block by block, the answer equals the gguf
    package's decoded values being all finite."""
    block_size, block_bytes = BLOCK_LAYOUT[GGMLType[type_name]]
    per = 16 if block_size == 1 else 1                  # plain floats: groups of 16 values
    raw = np.random.default_rng(11).integers(0, 256, size=400 * per * block_bytes, dtype=np.uint8)
    answers = []
    for piece in raw.reshape(400, per * block_bytes):
        with np.errstate(all="ignore"):
            finite = bool(np.isfinite(oracle(piece, type_name)).all())
        ours = decodes_finite(piece, GGMLType[type_name])
        if ours is not None:
            assert ours == finite, (type_name, piece[:8])
        answers.append(ours)
    if type_name == "MXFP4":
        assert set(answers) == {None}                   # said plainly: not decided from the bytes
    else:
        assert True in answers and False in answers     # both cases were met
    assert decodes_finite(random_blocks(type_name, 3000, np.random.default_rng(0)), GGMLType[type_name]) in (True, None)
