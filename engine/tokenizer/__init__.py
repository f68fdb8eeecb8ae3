"""Tokenizers built from GGUF metadata (a plain mapping, never a file).

    tok = build_tokenizer(metadata)
    ids = tok.encode("Hello", parse_special=False)      # BOS as the metadata says
    text = tok.decode(ids)
    stream = tok.stream_decoder(); piece = stream.push(next_id)

gpt2-style byte-level BPE runs on the Rust `tokenizers`; SentencePiece-style vocabularies with scores
run llama.cpp's SPM algorithm in Python (see spm.py for why).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .core import Tokenizer
from .stream import StreamDecoder
from .vocab import TokenType, Vocab

__all__ = ["StreamDecoder", "TokenType", "Tokenizer", "Vocab", "build_tokenizer"]


def build_tokenizer(metadata: Mapping[str, Any]) -> Tokenizer:
    return Tokenizer.from_metadata(metadata)
