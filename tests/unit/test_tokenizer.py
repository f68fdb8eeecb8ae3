"""Tokenizer behaviour on small synthetic vocabularies (no model files): SPM merge order, byte fallback,
special-token parsing, BOS/EOS flags, BPE pre-tokenizer choice, metadata validation, streaming decode."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from engine.errors import InvalidModelError, UnsupportedModelError
from engine.tokenizer import TokenType, build_tokenizer
from engine.tokenizer.bpe import byte_to_unicode

N, U, C, UD, B = TokenType.NORMAL, TokenType.UNKNOWN, TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.BYTE


def spm_metadata(**overrides):
    """<unk> <s> </s> <ctrl>, 256 byte tokens, then normal pieces with scores."""
    pieces = [("<unk>", 0.0, U), ("<s>", 0.0, C), ("</s>", 0.0, C), ("<ctrl>", 0.0, C), ("  ", 0.0, UD)]
    pieces += [(f"<0x{b:02X}>", 0.0, B) for b in range(256)]
    pieces += [("\u2581", -1.0, N), ("a", -1.0, N), ("b", -1.0, N), ("c", -1.0, N),
               ("ab", -5.0, N), ("bc", -2.0, N), ("abc", -3.0, N), ("\u2581a", -4.0, N),
               ("\u2581abc", -0.5, N), ("<", -1.0, N), (">", -1.0, N)]
    md = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [p[0] for p in pieces],
        "tokenizer.ggml.scores": np.array([p[1] for p in pieces], dtype=np.float32),
        "tokenizer.ggml.token_type": np.array([int(p[2]) for p in pieces], dtype=np.int32),
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True, "tokenizer.ggml.add_space_prefix": False,
    }
    md.update(overrides)
    return md


def bpe_metadata(**overrides):
    """Byte-level alphabet, a few merges, ChatML control tokens."""
    alphabet = [byte_to_unicode()[b] for b in range(256)]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + alphabet + ["he", "ll", "hell", "hello", "Ġw", "Ġwo"]
    types = [C, C, C] + [N] * (len(tokens) - 3)
    md = {
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": np.array(types, dtype=np.int32),
        "tokenizer.ggml.merges": ["h e", "l l", "he ll", "hell o", "Ġ w", "Ġw o"],
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_bos_token": False,
    }
    md.update(overrides)
    return md


def ids_of(tok, *texts):
    return [tok.token_to_id[t] for t in texts]


# ---- SPM ----------------------------------------------------------------------------------------
def test_spm_merges_highest_scoring_token_first():
    tok = build_tokenizer(spm_metadata())
    # "abc": bc (-2) beats ab (-5), then a+bc -> abc (-3)
    assert tok.encode("abc", add_bos=False) == ids_of(tok, "abc")
    # " abc": ▁+a would score -4 but bc (-2) goes first, then abc, then ▁abc (-0.5)
    assert tok.encode(" abc", add_bos=False) == ids_of(tok, "\u2581abc")
    assert tok.encode("ab", add_bos=False) == ids_of(tok, "ab")


def test_spm_unknown_characters_fall_back_to_byte_tokens():
    tok = build_tokenizer(spm_metadata())
    assert tok.encode("é", add_bos=False) == ids_of(tok, "<0xC3>", "<0xA9>")
    assert tok.decode(tok.encode("é🚀a")) == "é🚀a"


def test_spm_bos_and_space_prefix_follow_metadata():
    tok = build_tokenizer(spm_metadata())
    assert tok.encode("a")[0] == 1
    assert tok.encode("a", add_bos=False) == ids_of(tok, "a")
    prefixed = build_tokenizer(spm_metadata(**{"tokenizer.ggml.add_space_prefix": True}))
    assert prefixed.encode("abc", add_bos=False) == ids_of(prefixed, "\u2581abc")
    with_eos = build_tokenizer(spm_metadata(**{"tokenizer.ggml.add_eos_token": True}))
    assert with_eos.encode("a")[-1] == 2


def test_spm_special_tokens_parse_only_when_asked_but_user_defined_always():
    tok = build_tokenizer(spm_metadata())
    assert tok.encode("a<ctrl>b", add_bos=False, parse_special=True) == ids_of(tok, "a", "<ctrl>", "b")
    plain = tok.encode("a<ctrl>b", add_bos=False)
    assert tok.token_to_id["<ctrl>"] not in plain
    assert tok.decode(plain) == "a<ctrl>b"
    # user-defined "  " is split out even without special parsing (llama.cpp behaviour)
    assert tok.encode("a  b", add_bos=False) == ids_of(tok, "a", "  ", "b")


def test_control_tokens_decode_to_nothing_unless_asked():
    tok = build_tokenizer(spm_metadata())
    ids = tok.encode("a<ctrl>", add_bos=True, parse_special=True)
    assert tok.decode(ids) == "a"
    assert tok.decode(ids, skip_special=False) == "<s>a<ctrl>"


def test_stream_decoder_never_emits_a_replacement_mid_character():
    tok = build_tokenizer(spm_metadata())
    text = "a🚀é👨\u200d👩"
    ids = tok.encode(text, add_bos=False)
    stream = tok.stream_decoder()
    pieces = [stream.push(i) for i in ids]
    pieces.append(stream.flush())
    assert "".join(pieces) == tok.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces)
    assert pieces[1:4] == ["", "", ""]    # the 4 byte tokens of 🚀: nothing until the last one


def test_stream_decoder_flushes_a_cut_character_as_replacement():
    tok = build_tokenizer(spm_metadata())
    stream = tok.stream_decoder()
    assert stream.push(tok.token_to_id["<0xF0>"]) == ""
    assert stream.flush() == "\ufffd"
    with pytest.raises(ValueError):
        stream.push(10**6)


# ---- BPE ----------------------------------------------------------------------------------------
def test_bpe_merges_and_special_parsing():
    tok = build_tokenizer(bpe_metadata())
    assert tok.encode("hello wo") == ids_of(tok, "hello", "Ġwo")
    assert tok.encode("<|im_start|>hello", parse_special=True) == [1, tok.token_to_id["hello"]]
    plain = tok.encode("<|im_start|>hello")
    assert 1 not in plain and tok.decode(plain) == "<|im_start|>hello"
    assert tok.stop_ids == {0, 2}


def test_bpe_smollm_pre_tokenizer_splits_digits():
    tok = build_tokenizer(bpe_metadata())
    assert tok.encode("123") == ids_of(tok, "1", "2", "3")


@pytest.mark.parametrize("text", ["héllo wörld", "日本語 🚀", "a\t\n  b  ", "👨\u200d👩\u200d👧"])
def test_bpe_round_trip(text):
    tok = build_tokenizer(bpe_metadata())
    assert tok.decode(tok.encode(text)) == text


def test_unknown_pre_tokenizer_is_refused_by_name():
    with pytest.raises(UnsupportedModelError, match="'made-up-pre'"):
        build_tokenizer(bpe_metadata(**{"tokenizer.ggml.pre": "made-up-pre"}))


def test_missing_pre_tokenizer_warns_and_uses_default(caplog):
    md = bpe_metadata()
    del md["tokenizer.ggml.pre"]
    with caplog.at_level(logging.WARNING):
        tok = build_tokenizer(md)
    assert "pre" in caplog.text
    assert tok.decode(tok.encode("hello 123")) == "hello 123"


# ---- metadata validation ---------------------------------------------------------------------------
def test_unsupported_tokenizer_model():
    with pytest.raises(UnsupportedModelError, match="'bert'"):
        build_tokenizer(spm_metadata(**{"tokenizer.ggml.model": "bert"}))


def test_mismatched_array_lengths_name_the_field():
    md = spm_metadata()
    md["tokenizer.ggml.scores"] = md["tokenizer.ggml.scores"][:-1]
    with pytest.raises(InvalidModelError, match="tokenizer.ggml.scores"):
        build_tokenizer(md)


def test_special_id_outside_vocabulary():
    with pytest.raises(InvalidModelError, match="eos_token_id"):
        build_tokenizer(spm_metadata(**{"tokenizer.ggml.eos_token_id": 10**6}))


def test_decode_rejects_ids_outside_vocabulary():
    tok = build_tokenizer(spm_metadata())
    with pytest.raises(ValueError):
        tok.decode([tok.n_vocab])
