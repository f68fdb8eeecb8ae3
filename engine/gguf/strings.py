"""`StringArray`: a GGUF string array (a vocabulary, a merge list) as one UTF-8 blob and n+1 offsets.

As a list of Python str, gemma's 262,144 tokens take ~27 MiB (a str object is ~50 bytes before its text);
here they take their text's 2.3 MB plus 4 bytes a string. Indexing decodes one string; code that needs
the bytes (the tokenizer) reads them without making a str at all.

Invariants (checked by `StringArray.parse` and `from_strs`, relied on everywhere else): the blob is valid
UTF-8 and every string starts on a character boundary, so each string decodes on its own.
"""
from __future__ import annotations

import codecs
import itertools
import struct
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from engine.errors import InvalidModelError, TruncatedModelError
from engine.gguf.types import MAX_STRING_BYTES

_U64 = struct.Struct("<Q")
_CHUNK = 1 << 20                  # UTF-8 is validated this many bytes at a time (the decoded str is transient)
_ITER_CHUNK = 1 << 14             # strings whose offsets iteration holds as Python ints at a time


class StringArray(Sequence):
    """An immutable Sequence[str]. `blob` (bytes) holds the strings' UTF-8 back to back; string i is
    `blob[offsets[i]:offsets[i + 1]]`. Compares equal to a list or tuple of the same strings."""

    __slots__ = ("blob", "offsets", "_at")

    def __init__(self, blob: bytes, offsets: np.ndarray):
        """Trusted parts (use `parse` or `from_strs`): offsets [n + 1], non-decreasing, from 0 to len(blob)."""
        self.blob = blob
        self.offsets = offsets
        self.offsets.flags.writeable = False
        self._at = memoryview(offsets)     # indexing it gives Python ints (numpy scalars are ~5x slower)

    @classmethod
    def from_strs(cls, items: Iterable[str]) -> StringArray:
        items = list(items)
        if not all(type(s) is str for s in items):
            raise TypeError("a StringArray holds str only")
        encoded = [s.encode("utf-8") for s in items]    # raises on lone surrogates, as the file's check does
        lengths = np.fromiter(map(len, encoded), np.int64, len(encoded))
        return cls(b"".join(encoded), _offsets(lengths))

    @classmethod
    def parse(cls, buf, pos: int, end: int, count: int, field: str) -> tuple[StringArray, int]:
        """`count` GGUF strings (u64 length, then UTF-8) at `buf[pos:end]`; returns the array and the position
        after it. InvalidModelError names the string and its file offset for a bad length or bad UTF-8."""
        unpack = _U64.unpack_from
        starts = np.empty(count, np.int64)       # file offset of each string's text
        lengths = np.empty(count, np.int64)
        for index in range(count):               # the hot loop of opening a model: one unpack a string
            if pos + 8 > end:
                raise TruncatedModelError(f"the file ends inside string #{index} of the array", field=field,
                                          offset=pos)
            (length,) = unpack(buf, pos)
            if length > MAX_STRING_BYTES or length > end - pos - 8:
                raise _bad_length(index, length, end - pos - 8, field, pos)
            starts[index] = pos + 8
            lengths[index] = length
            pos += 8 + length
        blob = _without_prefixes(buf, starts - 8, pos)
        offsets = _offsets(lengths)
        bad = _first_bad_utf8(blob, offsets)
        if bad is not None:
            index, at, reason = bad
            raise InvalidModelError(f"string #{index} is not valid UTF-8 ({reason})", field=field,
                                    offset=int(starts[index]) + at)
        return cls(blob, offsets), pos

    def __len__(self) -> int:
        return len(self._at) - 1

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return self.item_bytes(index).decode("utf-8")

    def item_bytes(self, index: int) -> bytes:
        """String `index`'s UTF-8 bytes."""
        n = len(self._at) - 1
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"string index {index} is outside 0..{n - 1}")
        return self.blob[self._at[index]:self._at[index + 1]]

    def __iter__(self) -> Iterator[str]:
        """Each string, decoded as it is reached (C loops a chunk at a time: building a tokenizer walks 262k)."""
        return itertools.chain.from_iterable(map(self._decoded_chunk, range(0, len(self), _ITER_CHUNK)))

    def _decoded_chunk(self, lo: int) -> Iterator[str]:
        at = self.offsets[lo:lo + _ITER_CHUNK + 1].tolist()
        return map(bytes.decode, map(self.blob.__getitem__, map(slice, at[:-1], at[1:])))

    def byte_lengths(self) -> np.ndarray:
        return np.diff(self.offsets).astype(np.int64)

    @property
    def nbytes(self) -> int:
        return len(self.blob) + self.offsets.nbytes

    def __eq__(self, other) -> bool:
        if isinstance(other, StringArray):
            return self.blob == other.blob and np.array_equal(self.offsets, other.offsets)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None    # mutable-looking Sequence semantics: equal to lists, so not hashable

    def __repr__(self) -> str:
        return f"StringArray({len(self):,} strings, {len(self.blob):,} bytes)"


def _without_prefixes(buf, prefixes: np.ndarray, end: int) -> bytes:
    """The bytes of `buf` from prefixes[0] to `end` less the 8-byte length prefix at each of `prefixes`
    (sorted file offsets), a window at a time: the masks are transient and small."""
    if not len(prefixes):
        return b""
    first = int(prefixes[0])
    region = np.frombuffer(buf, np.uint8, count=end - first, offset=first)
    opens, closes = prefixes - first, prefixes - first + 8       # inside a prefix: opens <= x < closes
    parts, depth = [], 0
    for w0 in range(0, len(region), _CHUNK):
        w1 = min(len(region), w0 + _CHUNK)
        step = np.zeros(w1 - w0, np.int8)
        step[opens[np.searchsorted(opens, w0):np.searchsorted(opens, w1)] - w0] = 1
        # an empty string's close is the next prefix's open: 1 - 1 there, and the running depth stays 1
        step[closes[np.searchsorted(closes, w0):np.searchsorted(closes, w1)] - w0] -= 1
        inside = np.cumsum(step, dtype=np.int8)
        inside += depth
        depth = int(inside[-1])
        parts.append(region[w0:w1][inside == 0].tobytes())
    del region
    return b"".join(parts)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    """[n + 1] running sums of `lengths` from 0, as uint32 when the blob allows (it always does in practice)."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets.astype(np.uint32) if offsets[-1] < 1 << 32 else offsets


def _first_bad_utf8(blob: bytes, offsets: np.ndarray) -> tuple[int, int, str] | None:
    """(string index, byte offset inside it, reason) of the first UTF-8 error, or None. The whole blob is
    decoded a chunk at a time; a string that starts on a continuation byte would make a character span two
    strings (each invalid alone) although the blob as a whole decodes."""
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    error: tuple[int, str] | None = None
    for start in range(0, max(len(blob), 1), _CHUNK):
        try:
            decoder.decode(blob[start:start + _CHUNK], final=start + _CHUNK >= len(blob))
        except UnicodeDecodeError as e:
            # the decoder may hold back up to 3 bytes of an unfinished character from the last chunk
            error = (start + e.start - len(e.object) + len(blob[start:start + _CHUNK]), e.reason)
            break
    lengths = np.diff(offsets)
    heads = np.frombuffer(blob, np.uint8)[offsets[:-1][lengths > 0].astype(np.int64)]
    cut = np.flatnonzero((heads & 0xC0) == 0x80)
    if len(cut):
        at = int(offsets[:-1][lengths > 0][cut[0]])
        if error is None or at <= error[0]:
            error = (at, "a string starts inside a character")
    if error is None:
        return None
    at, reason = error
    index = int(np.searchsorted(offsets, at, side="right")) - 1
    while index > 0 and offsets[index] == offsets[index + 1]:   # the error belongs to a non-empty string
        index -= 1
    index = min(index, len(offsets) - 2)
    return index, at - int(offsets[index]), reason


def _bad_length(index: int, length: int, left: int, field: str, at: int) -> InvalidModelError:
    """A string length over the cap is a hostile file; one under it that runs past the end, a cut one."""
    if length > MAX_STRING_BYTES:
        return InvalidModelError(f"string #{index} of {length} bytes is over the cap of {MAX_STRING_BYTES}",
                                 field=field, offset=at)
    return TruncatedModelError(f"the file ends inside string #{index} of the array ({length} bytes, {left} left)",
                               field=field, offset=at)
