"""Repeats in a BPE vocabulary, handled as llama.cpp does (engine.tokenizer.bpe.build_bpe): a merge pair listed
twice keeps the rank of its first line (llama.cpp fills `bpe_ranks` with `emplace`, which never overwrites); a
token text listed twice maps to its last id (`token_to_id[word] = i`); a vocabulary `tokenizers` cannot take
is refused with the merge and the repeated token ids named."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from engine.errors import InvalidModelError
from engine.tokenizer import TokenType, build_tokenizer
from engine.tokenizer.bpe import byte_to_unicode

ALPHABET = [byte_to_unicode()[b] for b in range(256)]


def metadata(tokens: list[str], merges: list[str]) -> dict:
    """<|endoftext|>, <|im_start|>, <|im_end|> (control), the byte alphabet, then `tokens`."""
    texts = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *ALPHABET, *tokens]
    types = [TokenType.CONTROL] * 3 + [TokenType.NORMAL] * (len(texts) - 3)
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm", "tokenizer.ggml.tokens": texts,
            "tokenizer.ggml.token_type": np.array(types, np.int32), "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2}


def test_a_merge_listed_again_keeps_its_first_rank(caplog):
    once = build_tokenizer(metadata(["ab", "bc"], ["a b", "b c"]))
    ab, bc = once.token_to_id["ab"], once.token_to_id["bc"]
    assert once.encode("abc") == [ab, once.token_to_id["c"]]              # "a b" (rank 0) before "b c" (rank 1)
    with caplog.at_level(logging.WARNING, logger="engine.tokenizer.bpe"):
        twice = build_tokenizer(metadata(["ab", "bc"], ["a b", "b c", "a b"]))
    assert twice.encode("abc") == [ab, once.token_to_id["c"]]             # the last rank (2) would give a + bc
    assert twice.encode("abcabc") == once.encode("abcabc") and bc not in twice.encode("abc")
    assert "repeats 1 pairs" in caplog.text


def test_a_repeated_token_text_maps_to_its_last_id_and_plain_text_is_unaffected():
    md = metadata(["he", "ll", "hell", "hello"], ["h e", "l l", "he ll", "hell o"])
    reference = build_tokenizer(md)
    md["tokenizer.ggml.tokens"][1] = "<|im_end|>"               # ids 1 and 2 now share a text; no merge needs id 1's
    tok = build_tokenizer(md)
    assert tok.token_to_id["<|im_end|>"] == 2 and "<|im_start|>" not in tok.token_to_id
    assert tok.encode("hello hell") == reference.encode("hello hell")
    assert tok.token_text(1) == tok.token_text(2) == "<|im_end|>"


def test_a_repeat_that_replaced_a_merge_product_is_refused_naming_both_ids_and_the_merge():
    md = metadata(["he", "ll", "hell", "hello"], ["h e", "l l", "he ll", "hell o"])
    texts = md["tokenizer.ggml.tokens"]
    hell = texts.index("hell")
    texts[hell] = "hello"                                       # "he ll" now makes a text no id has
    with pytest.raises(InvalidModelError) as refused:
        build_tokenizer(md)
    assert str(refused.value) == (
        "the BPE vocabulary is rejected by the tokenizer: merge 2 ('he ll') makes 'hell', which is no token; "
        f"token ids {hell} and {hell + 1} have the same text 'hello' (field 'tokenizer.ggml.tokens')")
    assert refused.value.field == "tokenizer.ggml.tokens"


def test_a_merge_naming_no_token_is_refused_naming_the_merge_and_the_side():
    with pytest.raises(InvalidModelError) as refused:
        build_tokenizer(metadata(["ab"], ["a b", "zz\u00ff q"]))
    assert str(refused.value) == ("the BPE vocabulary is rejected by the tokenizer: merge 1 ('zz\u00ff q') names "
                                  "'zz\u00ff', which is no token (field 'tokenizer.ggml.merges')")
