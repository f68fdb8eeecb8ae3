"""engine.gpu.bench compares each figure with llama.cpp's figure for the same prompt length and depth, and its
table holds what ../shared/reference/README.md says (a pp512 run once was reported against the pp128 figure)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.gpu.bench import LLAMA_CPP_H200, _llama_cpp_line, compare_with_llama_cpp, reference_for
from tests.conftest import REFERENCE_DIR

QWEN3_4B = Path("qwen3-4b-shaped-q4_k.gguf")


def test_each_prompt_length_is_compared_with_its_own_figure():
    assert reference_for(QWEN3_4B, 128, 0) == (7439, 338)
    assert reference_for(QWEN3_4B, 512, 0) == (13369, 338)
    assert reference_for(QWEN3_4B, 16384, 16384) == (11773, 243)
    r = {"prefill_tok_s": 7336.0, "decode_tok_s": 340.0}
    compare_with_llama_cpp(r, QWEN3_4B, 512, 0)
    assert r["prefill_vs_llama_cpp"] == pytest.approx(7336 / 13369)
    assert "0.55x of 13369 (pp512)" in _llama_cpp_line(r, 512, 0)


def test_no_figure_for_that_length_means_no_ratio():
    assert reference_for(Path("smollm2-135m-q4_1.gguf"), 512, 0) == (None, 921)
    r = {"prefill_tok_s": 9000.0, "decode_tok_s": 100.0}
    compare_with_llama_cpp(r, QWEN3_4B, 32768, 32768)
    assert "prefill_vs_llama_cpp" not in r and "decode_vs_llama_cpp" not in r
    assert _llama_cpp_line(r, 32768, 32768) is None
    assert reference_for(Path("unknown.gguf"), 128, 0) == (None, None)


def test_every_figure_is_in_the_reference_readme():
    readme = REFERENCE_DIR / "README.md"
    if not readme.exists():
        pytest.skip(f"no {readme}")
    printed = {int(x.replace(",", "")) for x in re.findall(r"\b\d{1,3}(?:,\d{3})+\b|\b\d{3,5}\b", readme.read_text())}
    for model, ref in LLAMA_CPP_H200.items():
        for kind in ("prefill", "decode"):
            for length, figure in ref[kind].items():
                assert figure in printed, f"{model} {kind} at {length}: {figure} is not in {readme}"
