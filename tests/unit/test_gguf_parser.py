"""The bounded parser on handcrafted files: one valid file, then every bad-input class of SAFETY.md."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from gguf_builder import GGUFBytes, Tensor, gstr, kv_bytes, minimal_model, u32, u64

from engine.errors import InvalidModelError, ModelFileError, TruncatedModelError, UnsupportedModelError
from engine.gguf import GGMLType, GGUFValueType, open_gguf

V = GGUFValueType


@pytest.fixture
def write(tmp_path):
    counter = iter(range(1 << 30))

    def _write(data: bytes):
        path = tmp_path / f"f{next(counter)}.gguf"
        path.write_bytes(data)
        return path
    return _write


@pytest.fixture
def rejects(write):
    """Assert the bytes are refused, and that the error names `field` (a substring) if given."""
    def _rejects(data: bytes, field: str | None = None, match: str | None = None) -> InvalidModelError:
        with pytest.raises(InvalidModelError, match=match) as info:
            open_gguf(write(data))
        if field is not None:
            assert info.value.field is not None and field in info.value.field, str(info.value)
        return info.value
    return _rejects


# ---- a valid file ---------------------------------------------------------------------------------

def test_minimal_model_opens_with_expected_records(write):
    with open_gguf(write(minimal_model().build())) as g:
        assert g.version == 3 and g.alignment == 32 and g.data_offset % 32 == 0
        assert g.metadata["general.architecture"] == "llama"
        assert g.metadata["llama.block_count"] == 2
        assert g.metadata["tokenizer.ggml.tokens"][-1] == "é"
        scores = g.metadata["tokenizer.ggml.scores"]
        assert isinstance(scores, np.ndarray) and scores.dtype == np.float32 and not scores.flags.writeable
        assert list(g.tensors) == ["token_embd.weight", "blk.0.attn_norm.weight", "blk.0.attn_q.weight",
                                   "blk.0.attn_k.weight", "blk.1.attn_norm.weight", "blk.1.attn_q.weight",
                                   "blk.1.attn_k.weight"]
        k = g.tensors["blk.0.attn_k.weight"]
        assert k.ne == (64, 32) and k.shape == (32, 64) and k.ggml_type == GGMLType.F16
        assert k.n_elements == 2048 and k.nbytes == 4096 and k.offset % 32 == 0
        raw = g.raw("blk.0.attn_k.weight")
        assert raw.dtype == np.uint8 and raw.size == 4096 and not raw.flags.writeable
        assert g.dequantize("token_embd.weight").shape == (8, 64)
        with pytest.raises(TypeError):
            g.metadata["x"] = 1   # read-only mapping


def test_all_scalar_types_and_a_bool_array_decode(write):
    b = GGUFBytes()
    values = {V.UINT8: 255, V.INT8: -128, V.UINT16: 65535, V.INT16: -32768, V.UINT32: 2**32 - 1,
              V.INT32: -(2**31), V.FLOAT32: 1.5, V.BOOL: True, V.UINT64: 2**64 - 1, V.INT64: -(2**63),
              V.FLOAT64: -2.25, V.STRING: "日本"}
    for vtype, value in values.items():
        b.kv(f"k.{vtype.name}", vtype, value)
    b.kv("k.bools", V.ARRAY, (V.BOOL, [1, 0, 1]))
    b.kv("k.empty", V.ARRAY, (V.INT32, []))
    with open_gguf(write(b.build())) as g:
        for vtype, value in values.items():
            assert g.metadata[f"k.{vtype.name}"] == value
        assert g.metadata["k.bools"].tolist() == [True, False, True]
        assert g.metadata["k.empty"].size == 0
        assert len(g.tensors) == 0


def test_general_alignment_is_honoured(write):
    b = minimal_model()
    b.alignment = 64
    b.kv("general.alignment", V.UINT32, 64)
    with open_gguf(write(b.build())) as g:
        assert g.alignment == 64 and all(t.offset % 64 == 0 for t in g.tensors.values())


def test_unsupported_tensor_type_loads_but_refuses_to_dequantize(write):
    b = GGUFBytes().tensor("w", [256, 2], GGMLType.IQ2_XS)
    with open_gguf(write(b.build())) as g:
        assert g.tensors["w"].nbytes == 2 * 74
        with pytest.raises(UnsupportedModelError, match="IQ2_XS"):
            g.dequantize("w")


# ---- 1. magic, version, byte order, empty or truncated --------------------------------------------

def test_empty_file(rejects):
    rejects(b"", field="header")


def test_bad_magic(rejects):
    rejects(b"GGML" + minimal_model().build()[4:], field="magic")


@pytest.mark.parametrize("data", [b"hello\n", b"GGML", b"{}"])
def test_a_short_file_that_is_no_gguf_is_named_by_its_magic(rejects, data):
    """A few bytes of text are not "an unfinished download" (the header field): they are not a GGUF at all."""
    rejects(data, field="magic")


@pytest.mark.parametrize("data", [b"GG", b"GGUF", b"GGUF\x03\x00\x00\x00"])
def test_a_short_start_of_a_gguf_is_truncated(rejects, data):
    rejects(data, field="header")


@pytest.mark.parametrize("version", [0, 1, 4, 0xFFFFFFFF])
def test_unsupported_version(rejects, version):
    rejects(GGUFBytes(version=version).build(), field="version", match="version")


def test_big_endian_file(rejects):
    data = b"GGUF" + struct.pack(">I", 3) + struct.pack(">Q", 0) * 2
    rejects(data, field="version", match="big-endian")


@pytest.mark.parametrize("cut", [4, 8, 23, 30, 100, 200, 300, 400, 500, 700, -1])
def test_truncated_file(rejects, cut):
    data = minimal_model().build()
    rejects(data[:cut])


@pytest.mark.parametrize("cut", [4, 23, 30, 400, -1, -4096])
def test_a_file_cut_short_is_typed_as_truncated(write, cut):
    """The app advises "download it again" by this type (app.error_messages), never by the message's text:
    a cut in the header, before the tensor data, or inside it."""
    with pytest.raises(TruncatedModelError):
        open_gguf(write(minimal_model().build()[:cut]))


def test_a_damaged_file_that_is_not_cut_short_is_not_typed_as_truncated(rejects):
    error = rejects(b"GGML" + minimal_model().build()[4:], field="magic")
    assert not isinstance(error, TruncatedModelError)


# ---- 2. counts --------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_kv", [1 << 20, 2**64 - 1, 11])
def test_kv_count_over_cap_or_remaining_bytes(rejects, n_kv):
    rejects(minimal_model().build(n_kv=n_kv))


@pytest.mark.parametrize("n_tensors", [1 << 20, 2**64 - 1, 100])
def test_tensor_count_over_cap_or_remaining_bytes(rejects, n_tensors):
    rejects(minimal_model().build(n_tensors=n_tensors))


# ---- 3. strings -------------------------------------------------------------------------------------

def test_string_length_over_cap(rejects):
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.STRING) + gstr(b"x", length=1 << 40)).build(), field="k")


def test_string_past_end_of_file(rejects):
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.STRING) + gstr(b"xyz", length=1000)).build(), field="k")


def test_invalid_utf8_value_and_key(rejects):
    rejects(GGUFBytes().kv("k", V.STRING, b"\xff\xfe").build(), field="k", match="UTF-8")
    rejects(GGUFBytes().kv(b"\xc3", V.UINT8, 1).build(), match="UTF-8")
    rejects(GGUFBytes().kv("k", V.ARRAY, (V.STRING, ["ok", b"\xed\xa0\x80"])).build(), field="k", match="UTF-8")


# ---- 4. arrays --------------------------------------------------------------------------------------

def test_array_count_over_cap(rejects):
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.ARRAY) + u32(V.UINT8) + u64(1 << 40)).build(), field="k")


def test_array_count_over_remaining_bytes(rejects):
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.ARRAY) + u32(V.UINT64) + u64(1000) + bytes(16)).build(),
            field="k")
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.ARRAY) + u32(V.STRING) + u64(1000) + bytes(16)).build(),
            field="k")


def test_nested_array(rejects):
    inner = u32(V.UINT8) + u64(1) + b"\x01"
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.ARRAY) + u32(V.ARRAY) + u64(1) + inner).build(),
            field="k", match="nested")


@pytest.mark.parametrize("vtype", [13, 255, 2**32 - 1])
def test_unknown_value_type(rejects, vtype):
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(vtype) + bytes(8)).build(), field="k", match="value type")
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.ARRAY) + u32(vtype) + u64(0)).build(), field="k")


def test_bool_other_than_zero_or_one(rejects):
    rejects(GGUFBytes().raw_kv(gstr("k") + u32(V.BOOL) + b"\x02").build(), field="k")


# ---- 5. duplicates, empty keys, long names ----------------------------------------------------------

def test_duplicate_key(rejects):
    rejects(GGUFBytes().kv("a", V.UINT8, 1).kv("a", V.UINT8, 2).build(), field="a", match="twice")


def test_empty_key(rejects):
    rejects(GGUFBytes().kv("", V.UINT8, 1).build(), match="empty")


def test_duplicate_tensor_name(rejects):
    rejects(GGUFBytes().tensor("w", [4]).tensor("w", [4]).build(), field="w", match="twice")


def test_tensor_name_of_64_bytes_or_more(rejects, write):
    open_gguf(write(GGUFBytes().tensor("n" * 63, [4]).build())).close()
    rejects(GGUFBytes().tensor("n" * 64, [4]).build(), match="cap")


def test_empty_tensor_name(rejects):
    rejects(GGUFBytes().tensor("", [4]).build(), match="empty")


# ---- 6. dims ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("n_dims", [0, 5, 2**32 - 1])
def test_n_dims_out_of_range(rejects, n_dims):
    rejects(_with_tensor(Tensor("w", [4], 0, n_dims=n_dims)), field="n_dims")


def _with_tensor(t: Tensor) -> bytes:
    b = GGUFBytes()
    b.tensors.append(t)
    return b.build()


@pytest.mark.parametrize("dim", [0, 2**64 - 1, 2**63, 1 << 41])
def test_zero_negative_or_absurd_dim(rejects, dim):
    rejects(_with_tensor(Tensor("w", [4, dim], 0)), field="ne[1]")


def test_element_count_product_overflowing_64_bits(rejects):
    # each dim is allowed alone; the product is 2**160 and must not wrap to a small size
    rejects(_with_tensor(Tensor("w", [1 << 40] * 4, 0)), field="w.offset", match="past the end")


# ---- 7. types and block sizes -----------------------------------------------------------------------

@pytest.mark.parametrize("ggml_type", [4, 5, 31, 100, 2**32 - 1])
def test_unknown_tensor_type(rejects, ggml_type):
    rejects(_with_tensor(Tensor("w", [32], ggml_type)), field="w.type", match="unknown tensor type")


def test_first_dim_not_a_multiple_of_block_size(rejects):
    rejects(_with_tensor(Tensor("w", [33, 2], GGMLType.Q4_0)), field="w.ne[0]", match="block size")
    rejects(_with_tensor(Tensor("w", [128, 2], GGMLType.Q4_K)), field="w.ne[0]")


# ---- 8. alignment -----------------------------------------------------------------------------------

@pytest.mark.parametrize("alignment", [0, 3, 48, 1 << 20, 2**32 - 1])
def test_bad_alignment(rejects, alignment):
    rejects(GGUFBytes().kv("general.alignment", V.UINT32, alignment).build(), field="general.alignment")


def test_alignment_of_wrong_type(rejects):
    rejects(GGUFBytes().kv("general.alignment", V.STRING, "32").build(), field="general.alignment")
    rejects(GGUFBytes().kv("general.alignment", V.BOOL, 1).build(), field="general.alignment")


# ---- 9. tensor data placement -----------------------------------------------------------------------

def test_misaligned_tensor_data(rejects):
    rejects(GGUFBytes().tensor("w", [4], offset=4).build(), field="w.offset", match="alignment")


def test_overlapping_tensor_data(rejects):
    rejects(GGUFBytes().tensor("a", [64]).tensor("b", [64], offset=32).build(), match="overlaps")


def test_tensor_data_past_end_of_file(rejects):
    data = GGUFBytes().tensor("w", [64]).build()
    rejects(data[:-1], field="w.offset", match="past the end")
    rejects(GGUFBytes().tensor("w", [4], offset=2**64 - 32).build(), field="w.offset")


# ---- 10. hyperparameters, shapes, tokenizer ---------------------------------------------------------

def _model_with(key: str, vtype, value) -> bytes:
    return minimal_model(**{key.replace(".", "__"): (vtype, value)}).build()


@pytest.mark.parametrize("key,value", [
    ("llama.attention.head_count", 0),
    ("llama.attention.head_count", 3),        # 3 % 2 kv heads
    ("llama.attention.head_count", 6),        # 64 % 6
    ("llama.attention.head_count_kv", 0),
    ("llama.attention.head_count_kv", 3),     # 4 % 3
    ("llama.context_length", 0),
    ("llama.context_length", 1 << 40),
    ("llama.block_count", 1),                 # blk.1.* exists
    ("llama.embedding_length", 32),           # tensor shapes say 64
])
def test_hyperparameters_out_of_range_or_contradicting_shapes(rejects, key, value):
    rejects(_model_with(key, V.UINT64, value))


def test_tensor_shape_contradicting_head_count(rejects):
    b = minimal_model()
    b.tensor("blk.0.attn_v.weight", [64, 48], GGMLType.F32)   # 2 kv heads * 16 = 32 expected
    rejects(b.build(), field="blk.0.attn_v.weight")


def test_tokenizer_arrays_of_unequal_length(rejects):
    rejects(_model_with("tokenizer.ggml.scores", V.ARRAY, (V.FLOAT32, [0.0] * 7)), field="tokenizer.ggml.scores")


@pytest.mark.parametrize("token_id", [8, 2**32 - 1])
def test_special_token_outside_vocabulary(rejects, token_id):
    rejects(_model_with("tokenizer.ggml.eos_token_id", V.UINT32, token_id), field="eos_token_id")


def test_error_names_field_and_offset(rejects):
    data = GGUFBytes().kv("ok", V.UINT8, 1).raw_kv(kv_bytes("bad", V.STRING, b"\xff")).build()
    error = rejects(data, field="bad")
    assert error.offset == data.index(b"\xff") and f"offset {error.offset}" in str(error)


# ---- what is not a regular file --------------------------------------------------------------------

needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes made with mkfifo: POSIX only")


@needs_fifo
def test_a_named_pipe_is_refused_before_it_is_opened(tmp_path):
    """Opening a pipe with no writer would block its reader forever (the library's thread, a load)."""
    pipe = tmp_path / "model.gguf"
    os.mkfifo(pipe)
    with pytest.raises(ModelFileError, match="not a regular file"):
        open_gguf(pipe)


@needs_fifo
def test_a_named_pipe_with_a_writer_is_refused_too(tmp_path):
    """With a writer holding the pipe and bytes waiting, opening it would not block: the refusal is still the
    file's kind, not whatever the bytes look like (here the start of a GGUF)."""
    pipe = tmp_path / "model.gguf"
    os.mkfifo(pipe)
    writer = os.open(pipe, os.O_RDWR | os.O_NONBLOCK)
    try:
        os.write(writer, minimal_model().build()[:64])
        with pytest.raises(ModelFileError, match="not a regular file"):
            open_gguf(pipe)
    finally:
        os.close(writer)


def test_a_folder_is_refused_as_a_folder(tmp_path):
    with pytest.raises(ModelFileError, match="it is a folder"):
        open_gguf(tmp_path)
