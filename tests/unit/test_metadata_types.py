"""The metadata type sweep (SAFETY.md "Metadata is typed input"): every key a reader uses, given a wrong
type or an out-of-range value inside an otherwise valid model, is an InvalidModelError naming the key,
from every reader: the app's library scan, ModelInfo, ModelConfig, the tokenizer and the chat template."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from app.library import inspect_model
from engine.errors import InvalidModelError, UnsupportedModelError
from engine.gguf import REQUIRED, Meta, open_gguf
from engine.gguf.mutate import split, with_metadata
from engine.gguf.types import GGUFValueType as V
from engine.model.config import ModelConfig
from engine.model.loader import model_info
from engine.prompt import PromptFormat

DATA = Path(__file__).parents[1] / "golden" / "data"
BASE = DATA / "tiny-qwen2-f32.gguf"      # byte-level BPE, chat template, bool add_bos: every reader runs
A = "qwen2"


def read_everything(path: Path) -> None:
    """What opening a model does, reader by reader; the last line is what the app's scan does."""
    with open_gguf(path) as gguf:
        model_info(path, gguf)
        ModelConfig.from_metadata(gguf.metadata)
        PromptFormat.from_metadata(gguf.metadata)
    entry = inspect_model(path)
    if not entry.ok:
        raise InvalidModelError(entry.error)


def _arr(elem, items):
    return (V.ARRAY, (elem, items))


NUMBERS = _arr(V.INT32, [1, 2])
STRINGS = _arr(V.STRING, ["a", "b"])
CASES = {   # id: (key, typed value)
    "file_type array": ("general.file_type", NUMBERS),
    "file_type string": ("general.file_type", (V.STRING, "15")),
    "name numbers": ("general.name", NUMBERS),
    "name int": ("general.name", (V.UINT32, 5)),
    "context array": (f"{A}.context_length", STRINGS),
    "context per-layer": (f"{A}.context_length", _arr(V.UINT32, [256, 256])),
    "context 1": (f"{A}.context_length", (V.UINT32, 1)),
    "context string": (f"{A}.context_length", (V.STRING, "4096")),
    "template array": ("tokenizer.chat_template", NUMBERS),
    "template int": ("tokenizer.chat_template", (V.INT32, 7)),
    "rope scaling array": (f"{A}.rope.scaling.type", STRINGS),
    "attention scale array": (f"{A}.attention.scale", _arr(V.FLOAT32, [0.1])),
    "attention scale nan": (f"{A}.attention.scale", (V.FLOAT32, math.nan)),
    "attention scale inf": (f"{A}.attention.scale", (V.FLOAT32, math.inf)),
    "attention scale 0": (f"{A}.attention.scale", (V.FLOAT32, 0.0)),
    "rms eps huge": (f"{A}.attention.layer_norm_rms_epsilon", (V.FLOAT32, 1e30)),
    "rms eps nan": (f"{A}.attention.layer_norm_rms_epsilon", (V.FLOAT32, math.nan)),
    "rms eps string": (f"{A}.attention.layer_norm_rms_epsilon", (V.STRING, "1e-6")),
    "freq base huge": (f"{A}.rope.freq_base", (V.FLOAT64, 1e300)),
    "freq base 0": (f"{A}.rope.freq_base", (V.FLOAT32, 0.0)),
    "freq base nan": (f"{A}.rope.freq_base", (V.FLOAT32, math.nan)),
    "tokenizer model array": ("tokenizer.ggml.model", STRINGS),
    "tokenizer model int": ("tokenizer.ggml.model", (V.INT32, 2)),
    "tokenizer pre array": ("tokenizer.ggml.pre", NUMBERS),
    "add_bos array": ("tokenizer.ggml.add_bos_token", _arr(V.BOOL, [False])),
    "add_bos string false": ("tokenizer.ggml.add_bos_token", (V.STRING, "false")),
    "add_bos int": ("tokenizer.ggml.add_bos_token", (V.INT32, 1)),
    "add_eos array": ("tokenizer.ggml.add_eos_token", NUMBERS),
    "add_space_prefix string": ("tokenizer.ggml.add_space_prefix", (V.STRING, "false")),
    "bos id string": ("tokenizer.ggml.bos_token_id", (V.STRING, "1")),
    "token types unknown": ("tokenizer.ggml.token_type", None),     # built below from the vocabulary size
    "tokens numbers": ("tokenizer.ggml.tokens", None),
    "merges numbers": ("tokenizer.ggml.merges", NUMBERS),
}


def _base_metadata() -> dict:
    return split(BASE.read_bytes())[0]


def _value_for(case: str):
    key, value = CASES[case]
    if value is not None:
        return value
    n = len(_base_metadata()["tokenizer.ggml.tokens"])
    if case == "token types unknown":
        return _arr(V.INT32, [1] * (n - 1) + [99])
    return _arr(V.INT32, list(range(n)))


def test_the_base_model_reads_cleanly():
    read_everything(BASE)


@pytest.mark.parametrize("case", list(CASES))
def test_wrong_typed_metadata_is_an_invalid_model_error_naming_the_key(case, tmp_path):
    key = CASES[case][0]
    path = tmp_path / "m.gguf"
    path.write_bytes(with_metadata(BASE.read_bytes(), {key: _value_for(case)}))
    with pytest.raises(InvalidModelError) as raised:
        read_everything(path)
    assert key in str(raised.value)


def _vocab_case(mutate) -> dict:
    meta = _base_metadata()
    tokens, merges = list(meta["tokenizer.ggml.tokens"]), list(meta["tokenizer.ggml.merges"])
    mutate(tokens, merges)
    return {"tokenizer.ggml.tokens": (V.ARRAY, (V.STRING, tokens)),
            "tokenizer.ggml.merges": (V.ARRAY, (V.STRING, merges))}


def _flip_merge_target(tokens, merges):
    """One flipped bit in the token a merge produces: the merge now names a token that does not exist."""
    left, right = merges[0].split(" ")
    index = tokens.index(left + right)
    tokens[index] = chr(ord(tokens[index][0]) ^ 0x20) + tokens[index][1:] + "\u00ff\u00fe"


def _junk_merges(tokens, merges):
    merges[:3] = ["zzq yyq", "\u00ff\u00fe\u00fd qqq", "x"]


@pytest.mark.parametrize("mutate", [_flip_merge_target, _junk_merges])
def test_a_vocabulary_the_tokenizer_library_rejects_is_invalid(mutate, tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(with_metadata(BASE.read_bytes(), _vocab_case(mutate)))
    with pytest.raises(InvalidModelError, match="tokenizer"):
        read_everything(path)


def test_unsupported_values_stay_unsupported_not_invalid(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(with_metadata(BASE.read_bytes(), {"tokenizer.ggml.model": (V.STRING, "rwkv")}))
    with pytest.raises(UnsupportedModelError):
        read_everything(path)


def test_error_messages_quote_at_most_a_short_prefix_of_a_garbage_key():
    key = "k" * 100_000
    with pytest.raises(InvalidModelError) as raised:
        Meta({key: [1, 2]}).get_str(key)
    assert len(str(raised.value)) < 600


def test_accessor_contract():
    meta = Meta({"s": "x", "i": 5, "f": 0.5, "b": True, "nan": math.nan, "a": np.array([1, 2], np.int32),
                 "t": ["x", "y"], "sf": "false"})
    assert meta.get_str("s") == "x" and meta.get_str("missing", "d") == "d"
    assert meta.get_int("i", lo=1, hi=5) == 5 and meta.get_float("i") == 5.0
    assert meta.get_bool("b") is True and meta.get_str_list("t") == ["x", "y"]
    assert meta.get_array("a", kind="int").tolist() == [1, 2]
    for call in (lambda: meta.get_int("b"), lambda: meta.get_bool("sf"), lambda: meta.get_float("nan"),
                 lambda: meta.get_int("i", hi=4), lambda: meta.get_str("a"), lambda: meta.get_int("f"),
                 lambda: meta.get_str("missing", REQUIRED)):
        with pytest.raises(InvalidModelError):
            call()
