"""SmolLM2's real vocabulary with its merges listed again, or a token text repeated: ids stay llama.cpp's
reference ids (a repeated merge keeps its first rank, as llama.cpp's `bpe_ranks.emplace` does), and a repeat
that loses a text some merge makes is refused naming both ids. Built from the file's metadata: no copy of it."""
from __future__ import annotations

import pytest

from engine.errors import InvalidModelError
from engine.gguf import open_gguf
from engine.tokenizer import build_tokenizer

pytestmark = pytest.mark.golden

CAPITAL = "The capital of France is Paris"


@pytest.fixture(scope="module")
def metadata(smollm2_path) -> dict:
    with open_gguf(smollm2_path) as gguf:
        md = dict(gguf.metadata)
        md["tokenizer.ggml.tokens"] = list(md["tokenizer.ggml.tokens"])    # plain lists outlive the mapping
        md["tokenizer.ggml.merges"] = list(md["tokenizer.ggml.merges"])
        md["tokenizer.ggml.token_type"] = md["tokenizer.ggml.token_type"].copy()
        return md


@pytest.mark.parametrize("repeat", ["first 100 at the end", "every merge twice"])
def test_merges_listed_again_keep_llama_cpps_ids(metadata, smollm2_reference, repeat):
    merges = metadata["tokenizer.ggml.merges"]
    again = merges + merges[:100] if repeat == "first 100 at the end" else merges + merges
    tok = build_tokenizer({**metadata, "tokenizer.ggml.merges": again})
    assert tok.encode(CAPITAL) == [504, 3575, 282, 4649, 314, 7042]
    for entry in smollm2_reference["tokenize"]:
        assert tok.encode(entry["text"], add_bos=False) == entry["ids_no_bos"], entry["text"]


def test_a_repeated_text_that_loses_a_merge_product_names_the_ids_and_the_merge(metadata):
    tokens = list(metadata["tokenizer.ggml.tokens"])
    assert (tokens[500], tokens[501]) == ("ast", "Ġk")
    tokens[500] = tokens[501]                                   # "ast" is gone; "as t" still makes it
    with pytest.raises(InvalidModelError) as refused:
        build_tokenizer({**metadata, "tokenizer.ggml.tokens": tokens})
    message = str(refused.value)
    assert "merge 248 ('as t') makes 'ast', which is no token" in message
    assert "token ids 500 and 501 have the same text 'Ġk'" in message and refused.value.field == "tokenizer.ggml.tokens"


def test_a_repeated_control_text_is_accepted_with_the_last_id_as_llama_cpp_does(metadata):
    tokens = list(metadata["tokenizer.ggml.tokens"])
    tokens[1] = tokens[2]                                       # <|im_start|> -> a second <|im_end|>
    tok = build_tokenizer({**metadata, "tokenizer.ggml.tokens": tokens})
    assert tok.token_to_id["<|im_end|>"] == 2
    assert tok.encode(CAPITAL) == [504, 3575, 282, 4649, 314, 7042]
