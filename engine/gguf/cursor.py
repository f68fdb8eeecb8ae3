"""A bounded little-endian reader over the mapped file: every read is checked against the end first."""
from __future__ import annotations

import struct

from engine.errors import InvalidModelError, TruncatedModelError

_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class Cursor:
    """Reads fixed-size fields and length-prefixed strings from `buf[0:size]`, advancing `pos`.

    `buf` is the mmap (slicing it yields bytes). No read ever goes past `size`; a short file raises
    InvalidModelError naming the field and the offset where the read would have started.
    """

    def __init__(self, buf, size: int):
        self.buf = buf
        self.size = size
        self.pos = 0

    @property
    def remaining(self) -> int:
        return self.size - self.pos

    def need(self, n: int, field: str) -> None:
        if n < 0 or n > self.size - self.pos:
            raise TruncatedModelError(
                f"the file ends before {field} ({n} bytes needed, {self.size - self.pos} left)",
                field=field, offset=self.pos)

    def take(self, n: int, field: str) -> bytes:
        self.need(n, field)
        start = self.pos
        self.pos += n
        return self.buf[start:self.pos]

    def u32(self, field: str) -> int:
        self.need(4, field)
        (value,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return value

    def u64(self, field: str) -> int:
        self.need(8, field)
        (value,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return value

    def unpack(self, fmt: struct.Struct, field: str):
        self.need(fmt.size, field)
        (value,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return value

    def string(self, field: str, max_bytes: int) -> str:
        """A uint64 length then that many UTF-8 bytes."""
        at = self.pos
        length = self.u64(field)
        if length > max_bytes:
            raise InvalidModelError(f"string of {length} bytes is over the cap of {max_bytes}",
                                    field=field, offset=at)
        raw = self.take(length, field)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidModelError(f"string is not valid UTF-8 ({e.reason} at byte {e.start})",
                                    field=field, offset=at + 8 + e.start) from None
