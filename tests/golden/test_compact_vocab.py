"""The compact vocabulary tables (engine.gguf.strings.StringArray, engine.tokenizer.index.TokenIndex) on the
real starter vocabularies: the same ids as the plain dict and str list they replace, on a varied text, and a
resident cost of a few MiB for gemma's 262,144 tokens (a list of str and a dict cost ~50 MiB)."""
from __future__ import annotations

import heapq
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.gguf import open_gguf
from engine.tokenizer import build_tokenizer

pytestmark = pytest.mark.golden
ROOT = Path(__file__).resolve().parents[2]
_SPACE = "\u2581"

_VARIED = "\n".join([
    "The quick brown fox jumps over the lazy dog; THE QUICK BROWN FOX!!! 1234567890 3.14159 1e-9",
    "Ünïcödé façade naïve coöperate, Straße, ĳ, ﬁ ligature, e\u0301 (combining), Å vs \u212b",
    "日本語のテキストと中文文本，한국어 텍스트, русский текст, ελληνικά, עברית, العربية, हिन्दी, ไทย",
    "emoji 🚀🔥👍🏽 👨‍👩‍👧‍👦 🇯🇵 and symbols ∀x∈ℝ: x² ≥ 0 → ∞, ©®™ €£¥",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n\tif x:\r\n\t\tpass",
    "    leading spaces,   runs   of   spaces,\n\n\nblank lines, trailing  ",
    "<start_of_turn>user\nhi<end_of_turn>\n<|im_start|>system<|im_end|> <0x41> <unk> <pad> <mask>",
    "https://example.com/path?q=1&r=%20#frag user@example.org C:\\Windows\\path",
    "\x00\x01\x7f\u200b\u00a0\ufeff\U0010fffd end",
])


def _random_text(tokens, n: int, seed: int) -> str:
    """Vocabulary pieces glued together (so merges run deep) and random code points between them."""
    rng = random.Random(seed)
    parts = []
    for _ in range(n):
        parts.append(tokens[rng.randrange(len(tokens))].replace(_SPACE, " "))
        if rng.random() < 0.3:
            parts.append(chr(rng.choice((rng.randrange(32, 0x250), rng.randrange(0x3000, 0x9fff),
                                         rng.randrange(0x1f300, 0x1f6ff)))))
    return "".join(parts)


def _reference_spm(text: str, token_to_id: dict[str, int], scores, byte_ids) -> list[int]:
    """The SentencePiece encoder as it was over a plain dict (before the compact tables)."""
    symbols = list(text)
    n = len(symbols)
    if n == 0:
        return []
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prev = list(range(-1, n - 1))
    heap: list[tuple[float, int, int, int]] = []

    def push(left: int, right: int) -> None:
        if left >= 0 and right >= 0:
            merged = symbols[left] + symbols[right]
            token = token_to_id.get(merged)
            if token is not None:
                heapq.heappush(heap, (-scores[token], left, right, len(merged)))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, left, right, size = heapq.heappop(heap)
        if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != size:
            continue
        symbols[left] += symbols[right]
        symbols[right] = ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])
    out, i = [], 0
    while i >= 0:
        token = token_to_id.get(symbols[i])
        out.extend([token] if token is not None else [byte_ids[b] for b in symbols[i].encode("utf-8")])
        i = nxt[i]
    return out


def _reference_encode(tok, plain: dict[str, int], text: str, parse_special: bool) -> list[int]:
    """What Tokenizer.encode gave for an SPM vocabulary, with a plain dict for the lookups."""
    out, prev_special = [tok.bos_id] if tok.add_bos else [], True
    for fragment in tok.partition(text, parse_special):
        if isinstance(fragment, int):
            out.append(fragment)
            prev_special = True
        else:
            if tok.vocab.add_space_prefix and prev_special:
                fragment = " " + fragment
            out.extend(_reference_spm(fragment.replace(" ", _SPACE), plain, tok.vocab.scores, tok._byte_ids))
            prev_special = False
    return out


@pytest.fixture(scope="module", params=["smollm2_path", "gemma_path"])
def vocab(request):
    with open_gguf(request.getfixturevalue(request.param)) as g:
        metadata = dict(g.metadata)
    tokens = list(metadata["tokenizer.ggml.tokens"])
    return build_tokenizer(metadata), tokens, dict(zip(tokens, range(len(tokens)), strict=True))


def test_the_index_answers_as_the_dict_for_every_token_and_for_texts_that_are_not_tokens(vocab):
    tok, tokens, plain = vocab
    assert list(tok.vocab.tokens) == tokens
    assert len(tok.token_to_id) == len(plain)
    assert all(tok.token_to_id.get(t) == i for t, i in plain.items())
    text = _VARIED + _random_text(tokens, 2000, seed=1)
    probes = {text[i:i + k] for k in (1, 2, 3, 4, 7, 12) for i in range(len(text) - k)}
    assert sum(p in plain for p in probes) > 1000 and sum(p not in plain for p in probes) > 1000
    assert [tok.token_to_id.get(p) for p in sorted(probes)] == [plain.get(p) for p in sorted(probes)]
    assert set(tok.token_to_id) == set(plain)


def test_encoding_gives_the_ids_the_dict_gave_on_a_varied_text(vocab):
    tok, tokens, plain = vocab
    for text in [_VARIED, *(_random_text(tokens, 400, seed) for seed in range(4))]:
        if tok.vocab.model == "llama":      # SentencePiece: the encoder itself changed (lookups through the index)
            for special in (False, True):
                assert tok.encode(text, parse_special=special) == _reference_encode(tok, plain, text, special)
        else:                               # byte-level BPE: the Rust model, built from the same dict as before
            assert tok.decode(tok.encode(text, add_bos=False)) == text


_RESIDENT_CHILD = """
import gc, json, sys
from engine.bench import resident_mb
from engine.gguf import open_gguf
from engine.prompt import PromptFormat
import numpy, engine.tokenizer.index, engine.tokenizer.spm, tokenizers    # the code, before the data
before = resident_mb()
with open_gguf(sys.argv[1]) as g:
    fmt = PromptFormat.from_metadata(g.metadata)
    metadata = dict(g.metadata)
fmt.tokenizer.encode("warm the encoder up: Hello world, 日本語 🚀")
gc.collect()
print(json.dumps({"added": resident_mb() - before}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the resident size from /proc")
def test_gemmas_vocabulary_and_tokenizer_cost_a_few_mib_resident(gemma_path):
    """Opened, parsed, the tokenizer built and used, the metadata kept (as LoadedModel keeps it): the whole
    resident growth of a fresh process. With a str per token and a dict it was ~52 MiB."""
    run = subprocess.run([sys.executable, "-c", _RESIDENT_CHILD, str(gemma_path)], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    added = json.loads(run.stdout.strip().splitlines()[-1])["added"]
    print(f"gemma: metadata + tokenizer add {added:.1f} MiB resident")
    assert added < 20
