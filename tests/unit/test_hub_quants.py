"""Quantization names and split parts from real-world GGUF file names (engine.hub.quants)."""
from __future__ import annotations

import pytest

from engine.hub import RemoteFile, group_by_quant, quant_of, split_part


@pytest.mark.parametrize("name, quant", [
    ("Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"), ("qwen2.5-7b-instruct-q5_k_m.gguf", "Q5_K_M"),
    ("Meta-Llama-3.1-8B-Instruct-Q8_0.gguf", "Q8_0"), ("gpt-oss-20b-MXFP4.gguf", "MXFP4"),
    ("Llama-3.2-1B-Instruct-IQ4_XS.gguf", "IQ4_XS"), ("model-IQ2_XXS.gguf", "IQ2_XXS"),
    ("SmolLM2-135M-Instruct.Q4_1.gguf", "Q4_1"), ("gemma-3-270m-f16.gguf", "F16"), ("phi-4-BF16.gguf", "BF16"),
    ("unsloth/Qwen3-30B-A3B-UD-Q4_K_XL.gguf", "Q4_K_XL"), ("big-Q6_K-00001-of-00002.gguf", "Q6_K"),
    ("tokenizer.gguf", "other"),
])
def test_quant_of_names(name, quant):
    assert quant_of(name) == quant


def test_split_parts_are_recognised_and_grouped_in_order():
    assert split_part("m-Q8_0-00002-of-00003.gguf") == (2, 3)
    assert split_part("m-Q8_0.gguf") is None
    f = lambda name, size: RemoteFile("o/r", name, size, "0" * 64, "main")   # noqa: E731
    files = [f("m-Q8_0-00002-of-00002.gguf", 5), f("README.md", 1), f("m-Q4_K_M.gguf", 4),
             f("m-Q8_0-00001-of-00002.gguf", 6), f("m-F16.gguf", 16)]
    groups = group_by_quant(files)
    assert [g.quant for g in groups] == ["Q4_K_M", "Q8_0", "F16"]          # by size; README left out
    split = groups[1]
    assert split.split and split.size == 11
    assert [x.filename for x in split.files] == ["m-Q8_0-00001-of-00002.gguf", "m-Q8_0-00002-of-00002.gguf"]
    assert not groups[0].split


def test_pull_chooses_by_file_or_quant_and_lists_the_choices_otherwise():
    from engine.errors import DownloadError
    from engine.hub.pull import choose

    f = lambda name: RemoteFile("o/r", name, 1, "0" * 64, "main")   # noqa: E731
    files = [f("m-Q4_K_M.gguf"), f("sub/m-Q8_0.gguf"), f("m-F16-00001-of-00002.gguf"), f("m-F16-00002-of-00002.gguf")]
    assert choose(files, None).filename == "m-Q4_K_M.gguf"                  # the default quantization
    assert choose(files, "q8_0").filename == "sub/m-Q8_0.gguf"
    assert choose(files, "m-Q8_0.gguf").filename == "sub/m-Q8_0.gguf"
    with pytest.raises(DownloadError, match=r"'Q2_K' matches 0 files.*Q4_K_M \(m-Q4_K_M.gguf\).*F16 .*split"):
        choose(files, "Q2_K")
    with pytest.raises(DownloadError, match="Say which file"):
        choose(files[1:], None)
