"""The tokenizer's view of GGUF metadata: token texts, types, scores and the special ids, validated.

Input is a plain `Mapping[str, Any]` (what `engine.gguf.open_gguf(path).metadata` gives, or any dict):
the tokenizer never touches a file. Big arrays may arrive as numpy arrays or lists.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.errors import InvalidModelError, UnsupportedModelError, short_repr
from engine.gguf.meta import Meta
from engine.gguf.strings import StringArray


class TokenType(enum.IntEnum):
    """`tokenizer.ggml.token_type` values (same numbering as llama.cpp / gguf-py)."""

    UNDEFINED = 0
    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


# Texts that end a turn in common chat formats; they become stop ids when present as CONTROL tokens.
STOP_TOKEN_TEXTS = (
    "<|im_end|>", "<end_of_turn>", "<|endoftext|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>",
    "<|return|>", "<|call|>",      # harmony (gpt-oss): the reply is done / a tool call waits; its <|end|> is not
)

SUPPORTED_MODELS = ("gpt2", "llama")


def _as_float_array(value: np.ndarray) -> memoryview:
    """The scores as a memoryview of the metadata's own float array (no copy: gemma's 262,144 float32 scores
    stay 1 MiB, where a list of floats took 8); indexing it gives the same Python floats."""
    if value.dtype not in (np.float32, np.float64):
        value = value.astype(np.float64)
    return memoryview(np.ascontiguousarray(value))


@dataclass(frozen=True)
class Vocab:
    model: str                      # "gpt2" (byte-level BPE) or "llama" (SentencePiece with scores)
    pre: str                        # tokenizer.ggml.pre ("" when absent)
    tokens: StringArray             # id -> text, exactly as stored (one UTF-8 blob, not a str per token)
    types: bytes                    # id -> TokenType value (one byte each)
    scores: Sequence[float] | None  # id -> score (SPM; a memoryview of floats); None when absent
    merges: StringArray | None      # "left right" pairs, BPE only
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    eom_id: int | None
    unk_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool

    @property
    def n_vocab(self) -> int:
        return len(self.tokens)


def _optional_id(md: Meta, key: str, n_vocab: int, default: int | None = None) -> int | None:
    value = md.get_int(key, default)
    if value is None:
        return None
    if value == -1 or value == 0xFFFFFFFF:   # some converters write -1 / UINT32_MAX for "none"
        return None
    if not 0 <= value < n_vocab:
        raise InvalidModelError(f"special token id {value} is outside the vocabulary of {n_vocab}", field=key)
    return value


def vocab_from_metadata(md: Mapping[str, Any]) -> Vocab:
    md = Meta.of(md)
    model = md.get_str("tokenizer.ggml.model")
    if model is None:
        raise UnsupportedModelError("the model file has no tokenizer (tokenizer.ggml.model is missing)")
    if model not in SUPPORTED_MODELS:
        raise UnsupportedModelError(
            f"tokenizer type {short_repr(model)} is not supported (supported: {', '.join(SUPPORTED_MODELS)})")

    tokens = md.get_str_array("tokenizer.ggml.tokens")
    if tokens is None or len(tokens) == 0:
        raise InvalidModelError("the vocabulary is empty", field="tokenizer.ggml.tokens")
    n = len(tokens)

    raw_types = md.get_array("tokenizer.ggml.token_type", kind="int")
    if raw_types is None:
        raw_types = np.full(n, int(TokenType.NORMAL), np.uint8)
    if len(raw_types) != n:
        raise InvalidModelError(f"{len(raw_types)} token types for {n} tokens", field="tokenizer.ggml.token_type")
    lo, hi = int(raw_types.min()), int(raw_types.max())
    if not (lo >= 0 and hi <= max(TokenType)):
        raise InvalidModelError(f"token types must be 0..{int(max(TokenType))}, found {lo}..{hi}",
                                field="tokenizer.ggml.token_type")
    types = raw_types.astype(np.uint8).tobytes()

    raw_scores = md.get_array("tokenizer.ggml.scores", kind="number")
    scores = _as_float_array(raw_scores) if raw_scores is not None else None
    if scores is not None and len(scores) != n:
        raise InvalidModelError(f"{len(scores)} scores for {n} tokens", field="tokenizer.ggml.scores")
    if model == "llama" and scores is None:
        raise InvalidModelError("a SentencePiece vocabulary needs scores", field="tokenizer.ggml.scores")

    merges = md.get_str_array("tokenizer.ggml.merges")
    if model == "gpt2" and not merges:
        raise InvalidModelError("a BPE vocabulary needs merges", field="tokenizer.ggml.merges")

    is_spm = model == "llama"
    # Defaults follow llama.cpp: SPM adds BOS and a space prefix unless the file says otherwise.
    return Vocab(
        model=model,
        pre=md.get_str("tokenizer.ggml.pre", "", max_len=256),
        tokens=tokens,
        types=types,
        scores=scores,
        merges=merges,
        bos_id=_optional_id(md, "tokenizer.ggml.bos_token_id", n, 1 if is_spm else None),
        eos_id=_optional_id(md, "tokenizer.ggml.eos_token_id", n, 2 if is_spm else None),
        eot_id=_optional_id(md, "tokenizer.ggml.eot_token_id", n),
        eom_id=_optional_id(md, "tokenizer.ggml.eom_token_id", n),
        unk_id=_optional_id(md, "tokenizer.ggml.unknown_token_id", n, 0 if is_spm else None),
        add_bos=md.get_bool("tokenizer.ggml.add_bos_token", is_spm),
        add_eos=md.get_bool("tokenizer.ggml.add_eos_token", False),
        add_space_prefix=md.get_bool("tokenizer.ggml.add_space_prefix", is_spm),
    )


def special_token_table(vocab: Vocab) -> list[tuple[str, int, bool]]:
    """(text, id, is_control) for every token split out of raw text before BPE/SPM runs.

    Same set and order as llama.cpp's special-token cache: CONTROL, USER_DEFINED and UNKNOWN tokens,
    longest UTF-8 text first. USER_DEFINED tokens are always split out; CONTROL/UNKNOWN only when
    special parsing is on (is_control=True marks those).
    """
    kinds = np.frombuffer(vocab.types, np.uint8)
    wanted = np.flatnonzero(np.isin(kinds, (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN))
                            & (vocab.tokens.byte_lengths() > 0))
    table = [(vocab.tokens[i], i, vocab.types[i] != TokenType.USER_DEFINED) for i in wanted.tolist()]
    table.sort(key=lambda entry: -len(entry[0].encode("utf-8")))
    return table


def stop_ids_of(vocab: Vocab, token_to_id: Mapping[str, int]) -> frozenset[int]:
    ids = {i for i in (vocab.eos_id, vocab.eot_id, vocab.eom_id) if i is not None}
    for text in STOP_TOKEN_TEXTS:
        i = token_to_id.get(text)
        if i is not None and vocab.types[i] == TokenType.CONTROL:
            ids.add(i)
    return frozenset(ids)


def check_ids(ids: Sequence[int], n_vocab: int) -> None:
    for i in ids:
        if not 0 <= i < n_vocab:
            raise ValueError(f"token id {i} is outside the vocabulary of {n_vocab}")
