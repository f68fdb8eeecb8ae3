"""Byte-level BPE (`tokenizer.ggml.model == "gpt2"`: SmolLM2, Qwen2/3, Llama 3) on the Rust `tokenizers`.

The pre-tokenizer regexes are llama.cpp's, per `tokenizer.ggml.pre`; each list is applied in order,
every regex splitting the pieces the previous one left (llama.cpp's `unicode_regex_split`).
An unknown pre type is refused with UnsupportedModelError, as llama.cpp itself does: a wrong
pre-tokenizer silently produces different ids and degrades every answer, which is worse than a
clear "not supported" message. A file without `tokenizer.ggml.pre` gets llama.cpp's "default" list.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from engine.errors import InvalidModelError, UnsupportedModelError, short_repr

from .vocab import Vocab

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5/3.6: letters may carry combining marks (\p{M}) inside a word, and marks are not punctuation
_QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
           r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# o200k (tiktoken's o200k_base / o200k_harmony; gpt-oss): cased words keep their trailing contraction
_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
          r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]")

# pre name -> (regex list, ignore_merges). ignore_merges: a whole word found in the vocabulary is
# taken as one token before any merging (llama.cpp sets it for the Llama 3 family).
PRE_TOKENIZERS: dict[str, tuple[tuple[str, ...], bool]] = {}
for _names, _regexes, _ignore in (
    (("default",), _DEFAULT, False),
    (("gpt-2", "gpt2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
      "gigachat", "mellum", "a.x-4.0"), (_GPT2,), False),
    (("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
     (r"\p{N}", _GPT2), False),
    (("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"),
     (_LLAMA3,), True),
    (("dbrx", "smaug-bpe"), (_LLAMA3,), False),
    (("qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "megrez", "kormo", "f2llmv2"), (_QWEN2,), False),
    (("qwen35",), (_QWEN35,), False),
    (("gpt-4o",), (_GPT4O,), False),
):
    for _name in _names:
        PRE_TOKENIZERS[_name] = (_regexes, _ignore)


# pre types whose reference tokenizer NFC-normalizes text first (Qwen3.5's tokenizer.json and its tiktoken
# tokenizer do): without it a decomposed "e + U+0301" gives other ids than the model was trained on
NFC_PRE = frozenset({"qwen35"})


def pre_tokenizer_spec(pre: str) -> tuple[tuple[str, ...], bool]:
    if not pre:
        log.warning("tokenizer.ggml.pre is missing: using llama.cpp's 'default' BPE pre-tokenizer; "
                    "token ids may differ from the model's training")
        return PRE_TOKENIZERS["default"]
    spec = PRE_TOKENIZERS.get(pre)
    if spec is None:
        raise UnsupportedModelError(
            f"BPE pre-tokenizer {pre!r} (tokenizer.ggml.pre) is not supported; supported: "
            f"{', '.join(sorted(PRE_TOKENIZERS))}")
    return spec


@lru_cache(maxsize=1)
def byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


@lru_cache(maxsize=1)
def unicode_to_byte() -> dict[str, int]:
    return {c: b for b, c in byte_to_unicode().items()}


def build_bpe(vocab: Vocab) -> Tokenizer:
    """A `tokenizers.Tokenizer` that encodes plain text (no special tokens registered: those are split
    out beforehand by `specials.partition`). The dict and merge pairs it is built from are dropped once the
    Rust side holds its own copies. `tokenizers` is imported here, by BPE vocabularies only (~4 MiB resident
    that a SentencePiece model such as gemma does not need)."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    regexes, ignore_merges = pre_tokenizer_spec(vocab.pre)
    # Python objects alive together while the Rust side copies them: merge pairs made of the vocabulary's
    # own str objects (a new str per side was ~5 MiB more of SmolLM2's transient peak at load)
    texts = list(vocab.tokens)
    # a text repeated in the list: its last id wins, as in TokenIndex and llama.cpp's token_to_id
    token_to_id = dict(zip(texts, range(vocab.n_vocab), strict=True))
    get = token_to_id.get
    merges = []
    for line in vocab.merges or ():
        left, sep, right = line.partition(" ")
        if sep:                          # (a side that is no token stays as it is: the Rust side refuses it)
            i, j = get(left), get(right)
            merges.append((left if i is None else texts[i], right if j is None else texts[j]))
    merges = _first_rank_of_each_pair(merges)
    try:
        model = models.BPE(vocab=token_to_id, merges=merges, ignore_merges=ignore_merges, fuse_unk=False)
    except Exception as e:   # the Rust library raises plain Exception for merges naming unknown tokens etc.
        raise _refusal(vocab.merges or (), texts, token_to_id, str(e)) from None
    tok = Tokenizer(model)
    if vocab.pre in NFC_PRE:
        tok.normalizer = normalizers.NFC()
    splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in regexes]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [*splits, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    return tok


def _first_rank_of_each_pair(merges: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`merges` without the later repeats of a pair. llama.cpp ranks a pair by its first line (`bpe_ranks.emplace`
    does not overwrite); `tokenizers` would keep the last, moving the pair behind every merge in between and
    scrambling the ids of common words. (~10 ms for SmolLM2's 48,900 merges; the dict is gone before the Rust
    side copies the merges, so it adds nothing to the load's peak.)"""
    first = dict.fromkeys(merges)                  # insertion order: each pair at its first line
    if len(first) == len(merges):
        return merges
    log.warning("tokenizer.ggml.merges repeats %d pairs: each keeps the rank of its first line, as in llama.cpp",
                len(merges) - len(first))
    return list(first)


def _refusal(lines: Sequence[str], texts: list[str], token_to_id: Mapping[str, int],
             reason: str) -> InvalidModelError:
    """Why `tokenizers` refused the vocabulary, in the file's terms (a failed load only: it reads every merge
    again). A repeated token text alone is accepted, as llama.cpp does (the last id wins); it is named here
    because a repeat that replaced a text some merge makes is the usual way to get such a refusal."""
    message = f"the BPE vocabulary is rejected by the tokenizer: {short_repr(reason)}"
    for k, line in enumerate(lines):
        left, sep, right = line.partition(" ")
        checks = (("names", left), ("names", right), ("makes", left + right)) if sep else ()
        verb, missing = next(((v, t) for v, t in checks if t not in token_to_id), (None, None))
        if verb is not None:
            message = (f"the BPE vocabulary is rejected by the tokenizer: merge {k} ({short_repr(line, 60)}) "
                       f"{verb} {short_repr(missing, 60)}, which is no token")
            break
    if len(token_to_id) == len(texts):
        return InvalidModelError(message, field="tokenizer.ggml.merges")
    repeats = [(i, token_to_id[t]) for i, t in enumerate(texts) if token_to_id[t] != i]
    named = "; ".join(f"token ids {i} and {j} have the same text {short_repr(texts[j], 60)}" for i, j in repeats[:3])
    more = f" ({len(repeats) - 3} more repeats)" if len(repeats) > 3 else ""
    return InvalidModelError(f"{message}; {named}{more}", field="tokenizer.ggml.tokens")


def bpe_token_bytes(text: str) -> bytes:
    """Bytes of a byte-level vocabulary entry; texts outside the byte alphabet are taken as raw UTF-8."""
    table = unicode_to_byte()
    try:
        return bytes(table[c] for c in text)
    except KeyError:
        return text.encode("utf-8")
