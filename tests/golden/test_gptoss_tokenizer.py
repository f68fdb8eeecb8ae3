"""gpt-oss's tokenizer: our byte-level BPE on the o200k_harmony vocabulary (as llama.cpp's converter writes it
into a GGUF, pre-tokenizer "gpt-4o") gives tiktoken's ids for every text, harmony's special tokens included.
The reference is tiktoken itself with o200k_base's ranks from the bpe-openai package (tests/tools/gptoss_vocab.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("tiktoken")
pytest.importorskip("bpe_openai")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from gptoss_vocab import reference_encoding, tokenizer_metadata  # noqa: E402

from engine.tokenizer import build_tokenizer  # noqa: E402

TEXTS = [
    "Hello world! How are you today?",
    "I'M SURE they'll say it's fine; WE'LL SEE. Don't.",
    "def main():\n    return {'x': [1, 22, 333, 4444, 55555]}\n\n\n",
    "   leading spaces, trailing tabs\t\t\n\r\nwindows lines\r\n",
    "Numbers 1234567 and 3.14159, dates 2026-12-04, paths a/b/c//d.",
    "Ünïcödé: naïve café, Straße, Ωμέγα, русский текст, 中文文本，日本語のテキスト、한국어",
    "emoji 👍🏽 family 👨‍👩‍👧 flags 🇫🇷 and e\u0301 combining",
    "CamelCaseWords and snake_case_words and SHOUTING",
    "",
]
HARMONY_TEXT = ("<|start|>system<|message|>Reasoning: low<|end|><|start|>user<|message|>Hi there<|end|>"
                "<|start|>assistant<|channel|>analysis<|message|>Greet.<|end|><|start|>assistant<|channel|>final"
                "<|message|>Hello!<|return|>")


@pytest.fixture(scope="module")
def pair():
    enc = reference_encoding()
    return enc, build_tokenizer(tokenizer_metadata(enc))


def test_ordinary_text_gives_tiktokens_ids(pair):
    enc, ours = pair
    for text in TEXTS:
        assert ours.encode(text, parse_special=False) == enc.encode_ordinary(text), text
        assert ours.decode(enc.encode_ordinary(text)) == text


def test_harmony_special_tokens_are_single_ids(pair):
    enc, ours = pair
    ids = ours.encode(HARMONY_TEXT, parse_special=True)
    assert ids == enc.encode(HARMONY_TEXT, allowed_special="all")
    for name, i in (("<|return|>", 200002), ("<|channel|>", 200005), ("<|start|>", 200006), ("<|end|>", 200007),
                    ("<|message|>", 200008), ("<|call|>", 200012)):
        assert ours.token_to_id[name] == i
    assert {200002, 200012} <= ours.stop_ids and 200007 not in ours.stop_ids      # <|end|> does not stop


def test_600_varied_strings_give_tiktokens_ids(pair):
    """The same 600 strings as Qwen3.5's tokenizer golden (ASCII, CJK, emoji, code, numbers, whitespace runs,
    contractions), on o200k's own pre-tokenizer pattern: ordinary text, and with harmony's specials parsed."""
    from tests.unit.test_qwen35_tokenizer import FIXED, generated

    enc, ours = pair
    strings = FIXED + TEXTS + generated(600 - len(FIXED) - len(TEXTS), seed=1)
    assert len(strings) == 600
    wrong = [s for s in strings if ours.encode(s, parse_special=False) != enc.encode_ordinary(s)]
    assert not wrong, [(s, ours.encode(s, parse_special=False), enc.encode_ordinary(s)) for s in wrong[:3]]
    framed = [f"<|start|>user<|message|>{s}<|end|><|start|>assistant<|channel|>analysis<|message|>" for s in strings]
    wrong = [s for s in framed if ours.encode(s, parse_special=True) != enc.encode(s, allowed_special="all")]
    assert not wrong, wrong[:3]
