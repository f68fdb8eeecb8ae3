"""Incremental detokenization for streaming: ids in one at a time, complete UTF-8 text out."""
from __future__ import annotations

import codecs
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Tokenizer


class StreamDecoder:
    """Feed ids with `push(id)`; each call returns the text that became complete (often "", e.g. while
    a multi-byte character is split across tokens). `flush()` at the end returns what is left (an
    incomplete trailing character becomes U+FFFD there, never mid-stream).

    The concatenation of all returned strings equals `tokenizer.decode(all_ids)`. Not thread-safe:
    one decoder per stream.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = True):
        self._tokenizer = tokenizer
        self._special = not skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.ids: list[int] = []

    def push(self, token_id: int) -> str:
        if not 0 <= token_id < self._tokenizer.n_vocab:
            raise ValueError(f"token id {token_id} is outside the vocabulary of {self._tokenizer.n_vocab}")
        self.ids.append(token_id)
        return self._utf8.decode(self._tokenizer.token_bytes(token_id, special=self._special))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)
