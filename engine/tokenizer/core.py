"""`Tokenizer`: encode and decode for a GGUF vocabulary, matching llama.cpp's token ids exactly.

Thread safety: a built Tokenizer is read-only after construction except for a per-id bytes cache that
is filled idempotently; it may be shared between threads.
"""
from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from engine.errors import InvalidRequestError

from .bpe import bpe_token_bytes, build_bpe
from .index import TokenIndex
from .specials import partition
from .spm import byte_token_ids, spm_encode
from .vocab import TokenType, Vocab, check_ids, special_token_table, stop_ids_of, vocab_from_metadata

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPM_SPACE = "\u2581"
_UNKNOWN_PIECE = "\u2585".encode()   # what llama.cpp prints for an UNKNOWN token
# A lone UTF-16 surrogate: Python text can hold one (from "\ud800" in JSON, or bytes decoded with surrogateescape), but
# it is no Unicode character and has no UTF-8 bytes, so neither tokenizer can take it. Model files never give one
# (GGUF strings are decoded strictly), so it is always the caller's text.
_SURROGATE = re.compile("[\ud800-\udfff]")


class Tokenizer:
    """Build with `Tokenizer.from_metadata(md)` (a plain mapping of GGUF metadata)."""

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.token_to_id: Mapping[str, int] = TokenIndex(vocab.tokens)    # a compact dict: last id wins
        self._specials = special_token_table(vocab)
        self.stop_ids: frozenset[int] = stop_ids_of(vocab, self.token_to_id)
        self._piece_cache: dict[int, bytes] = {}     # the ids decoded so far (a list of n_vocab would be 2 MiB)
        self._affixes: tuple[frozenset[str], frozenset[str]] | None = None
        if vocab.model == "gpt2":
            self._bpe = build_bpe(vocab)
        else:
            self._byte_ids = byte_token_ids(self.token_to_id, vocab.unk_id)

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Tokenizer:
        return cls(vocab_from_metadata(metadata))

    # ---- facts -------------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def bos_id(self) -> int | None:
        return self.vocab.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.vocab.eos_id

    @property
    def eot_id(self) -> int | None:
        return self.vocab.eot_id

    @property
    def add_bos(self) -> bool:
        return self.vocab.add_bos and self.vocab.bos_id is not None

    @functools.cached_property
    def max_token_bytes(self) -> int:
        """An upper bound on the bytes one token stands for (its stored UTF-8 text is never shorter)."""
        return max(1, int(self.vocab.tokens.byte_lengths().max()))

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry as stored (byte-level or U+2581-escaped), for display and debugging."""
        return self.vocab.tokens[token_id]

    def is_control(self, token_id: int) -> bool:
        return self.vocab.types[token_id] == TokenType.CONTROL

    def control_texts(self) -> list[str]:
        """Texts that special parsing turns into control tokens (longest first)."""
        return [text for text, _, is_control in self._specials if is_control]

    def control_affixes(self) -> tuple[frozenset[str], frozenset[str]]:
        """(proper prefixes, proper suffixes) of all control texts; built on first use, then cached."""
        if self._affixes is None:
            texts = self.control_texts()
            prefixes = frozenset(t[:k] for t in texts for k in range(1, len(t)))
            suffixes = frozenset(t[k:] for t in texts for k in range(1, len(t)))
            self._affixes = (prefixes, suffixes)
        return self._affixes

    # ---- encode ------------------------------------------------------------------------------
    def encode(self, text: str, add_bos: bool | None = None, parse_special: bool = False,
               add_eos: bool | None = None) -> list[int]:
        """Token ids for `text`. add_bos/add_eos None: as the metadata says. parse_special: control
        tokens written in the text (e.g. "<|im_start|>") become their ids; otherwise they are plain text."""
        return self.encode_fragments(partition(text, self._specials, parse_special), add_bos, add_eos)

    def encode_fragments(self, fragments: Sequence[str | int], add_bos: bool | None = None,
                         add_eos: bool | None = None) -> list[int]:
        """Encode already-partitioned fragments (raw text or decided ids); BOS/EOS as in `encode`."""
        vocab = self.vocab
        for fragment in fragments:
            if isinstance(fragment, str) and not fragment.isascii() and (bad := _SURROGATE.search(fragment)):
                raise InvalidRequestError(
                    f"The text contains U+{ord(bad.group()):04X}, half of a UTF-16 surrogate pair without its other "
                    "half: it is not valid Unicode. Send the text as valid UTF-8 (a lone \\uD800-\\uDFFF escape "
                    "in JSON makes one).")
        out: list[int] = []
        if (vocab.add_bos if add_bos is None else add_bos) and vocab.bos_id is not None:
            out.append(vocab.bos_id)
        if vocab.model == "gpt2":
            for fragment in fragments:
                if isinstance(fragment, int):
                    out.append(fragment)
                elif fragment:
                    out.extend(self._bpe.encode(fragment, add_special_tokens=False).ids)
        else:
            prev_special = True     # llama.cpp: the space prefix goes on text that follows a token/start
            seen: dict[str, int | None] = {}     # vocabulary lookups, shared by this text's fragments
            for fragment in fragments:
                if isinstance(fragment, int):
                    out.append(fragment)
                    prev_special = True
                elif fragment:
                    if vocab.add_space_prefix and prev_special:
                        fragment = " " + fragment
                    out.extend(spm_encode(fragment.replace(" ", _SPM_SPACE), self.token_to_id.get,
                                          vocab.scores, self._byte_ids, seen))
                    prev_special = False
        if (vocab.add_eos if add_eos is None else add_eos) and vocab.eos_id is not None:
            out.append(vocab.eos_id)
        return out

    def partition(self, text: str, parse_special: bool) -> list[str | int]:
        return partition(text, self._specials, parse_special)

    # ---- decode ------------------------------------------------------------------------------
    def token_bytes(self, token_id: int, special: bool = False) -> bytes:
        """The bytes one token stands for. Control tokens give b"" unless `special` is true."""
        ttype = self.vocab.types[token_id]
        if ttype == TokenType.CONTROL:
            return self.vocab.tokens.item_bytes(token_id) if special else b""
        cached = self._piece_cache.get(token_id)
        if cached is None:
            cached = self._piece_cache[token_id] = self._compute_piece(token_id, ttype)
        return cached

    def _compute_piece(self, token_id: int, ttype: int) -> bytes:
        text = self.vocab.tokens[token_id]
        if ttype == TokenType.UNUSED:
            return b""
        if ttype == TokenType.UNKNOWN:
            return _UNKNOWN_PIECE
        if self.vocab.model == "gpt2":
            return text.encode("utf-8") if ttype == TokenType.USER_DEFINED else bpe_token_bytes(text)
        if ttype == TokenType.BYTE:
            match = _BYTE_TOKEN.fullmatch(text)
            return bytes([int(match.group(1), 16)]) if match else text.encode("utf-8")
        return text.replace(_SPM_SPACE, " ").encode("utf-8")

    def decode_bytes(self, ids: Sequence[int], skip_special: bool = True) -> bytes:
        check_ids(ids, self.n_vocab)
        return b"".join(self.token_bytes(i, special=not skip_special) for i in ids)

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of `ids`; invalid UTF-8 (e.g. a cut multi-byte character) becomes U+FFFD."""
        return self.decode_bytes(ids, skip_special).decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special: bool = True):
        from .stream import StreamDecoder

        return StreamDecoder(self, skip_special=skip_special)
