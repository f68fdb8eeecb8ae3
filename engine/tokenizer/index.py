"""`TokenIndex`: token text -> id over a StringArray vocabulary, in a few MiB instead of a dict.

A dict of gemma's 262,144 tokens costs ~25 MiB on top of the tokens themselves (its table, an int object
per id, a str object per key). Here: an open-addressing table of ids (2^k >= 2n slots of int32, probed
linearly from `hash(text)`), a 32-bit tag per token (the hash's high half, so most probes that miss never
touch the text) and the vocabulary's own UTF-8 blob to confirm a hit. Python's str hash is salted per
process, so the table is built in the process that uses it (~40 ms for gemma; the str objects it hashes
are made and dropped one at a time).

Same answers as `dict(zip(tokens, range(n)))`: where two ids share a text, the last one wins.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from engine.gguf.strings import StringArray

_EMPTY = -1


class TokenIndex(Mapping):
    """A read-only Mapping[str, int]; `get` is the hot path (the SentencePiece encoder calls it per merge)."""

    def __init__(self, tokens: StringArray):
        self.tokens = tokens
        n = len(tokens)
        hashes = np.fromiter(map(hash, tokens), np.int64, n)
        keep = _last_of_each_text(tokens, hashes)
        self._size = int(keep.sum())
        size = 1 << max(3, (2 * n - 1).bit_length())        # >= 2n slots: a load of at most 1/2
        self._mask = size - 1
        slots = np.full(size, _EMPTY, np.int32)
        ids = np.flatnonzero(keep).astype(np.int32)
        pos = hashes[ids] & self._mask
        while len(ids):                      # every id still unplaced moves one slot on per round (linear probing)
            free = slots[pos] == _EMPTY
            slots[pos[free]] = ids[free]       # where several claim one free slot, one of them gets it
            placed = free & (slots[pos] == ids)
            ids, pos = ids[~placed], (pos[~placed] + 1) & self._mask
        tags = (hashes >> 32).astype(np.uint32)             # each token's tag: its hash's high 32 bits
        slots.flags.writeable = tags.flags.writeable = False
        self._slots, self._tags = memoryview(slots), memoryview(tags)   # indexing gives Python ints
        self._arrays = (slots, tags)
        self._at, self._blob = tokens._at, tokens.blob

    @property
    def nbytes(self) -> int:
        """Bytes of the table itself (the vocabulary's blob is the StringArray's)."""
        return sum(a.nbytes for a in self._arrays)

    def get(self, text: str, default=None):
        h = hash(text)
        tag = (h >> 32) & 0xFFFFFFFF                 # the tags' bits (__init__): the hash's high 32 bits
        slots, tags, at = self._slots, self._tags, self._at
        mask = self._mask
        i = h & mask
        while (token := slots[i]) != _EMPTY:
            if tags[token] == tag:
                start = at[token]
                if self._blob[start:at[token + 1]] == text.encode("utf-8", "surrogatepass"):
                    return token
            i = (i + 1) & mask
        return default

    def __getitem__(self, text: str) -> int:
        token = self.get(text)
        if token is None:
            raise KeyError(text)
        return token

    def __contains__(self, text) -> bool:
        return isinstance(text, str) and self.get(text) is not None

    def __iter__(self) -> Iterator[str]:
        for token in self._slots:
            if token != _EMPTY:
                yield self.tokens[token]

    def __len__(self) -> int:
        return self._size


def _last_of_each_text(tokens: StringArray, hashes: np.ndarray) -> np.ndarray:
    """[n] bool: the ids a dict built in id order would keep (the last of each text). Only ids whose hash
    is shared are compared by their bytes (texts repeat in few vocabularies; full hashes almost never)."""
    keep = np.ones(len(hashes), bool)
    order = np.argsort(hashes)
    ordered = hashes[order]
    shared = np.flatnonzero(ordered[1:] == ordered[:-1])
    groups: dict[int, list[int]] = {}
    for k in shared:
        for token in (int(order[k]), int(order[k + 1])):
            groups.setdefault(int(hashes[token]), [])
            if token not in groups[int(hashes[token])]:
                groups[int(hashes[token])].append(token)
    for members in groups.values():
        last: dict[bytes, int] = {}
        for token in sorted(members):
            last[tokens.item_bytes(token)] = token
        for token in members:
            keep[token] = last[tokens.item_bytes(token)] == token
    return keep
