"""`open_gguf`: the bounded, validating GGUF parser over one read-only memory map.

Layout of a GGUF (v2/v3, little-endian): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, the KV pairs,
the tensor infos, padding to `general.alignment` (default 32), then the tensor data. Every count, length
and offset is checked before it is used, so any byte string either opens or raises InvalidModelError
(naming the field and offset) in time and memory proportional to the file's size.
"""
from __future__ import annotations

import mmap
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from engine.errors import InvalidModelError, ModelFileError, TruncatedModelError, short_repr
from engine.gguf.consistency import check_consistency
from engine.gguf.cursor import Cursor
from engine.gguf.dequant import dequantize as _dequantize
from engine.gguf.metadata import read_metadata
from engine.gguf.tensors import TensorInfo, place_tensors, read_tensor_infos
from engine.gguf.types import DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_ALIGNMENT, SUPPORTED_VERSIONS, GGUFValueType

_HEADER_BYTES = 24   # magic 4 + version 4 + n_tensors 8 + n_kv 8


class GGUFFile:
    """An opened GGUF file. Immutable after open; a context manager.

    Attributes: `path`, `version`, `alignment`, `data_offset` (absolute start of tensor data),
    `file_size`, `metadata` (read-only mapping in file order; see engine.gguf.metadata for value types:
    scalars as int/float/bool/str, string arrays as list[str], numeric and bool arrays as read-only
    1-D numpy arrays), `tensors` (read-only mapping name -> TensorInfo in file order).

    `raw()` views share the map: they stay valid after `close()` (the OS mapping lives until the last
    view is gone), but no new views can be made.
    """

    def __init__(self, path: Path, version: int, alignment: int, data_offset: int, file_size: int,
                 metadata: dict, tensors: dict[str, TensorInfo], data: np.ndarray | None):
        self.path = path
        self.version = version
        self.alignment = alignment
        self.data_offset = data_offset
        self.file_size = file_size
        self.metadata: Mapping[str, Any] = MappingProxyType(metadata)
        self.tensors: Mapping[str, TensorInfo] = MappingProxyType(tensors)
        self._data = data     # read-only uint8 view of the whole map

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only uint8 view into the map (no copy)."""
        info = self.tensors[name]
        if self._data is None:
            raise ValueError(f"{self.path} is closed")
        return self._data[info.offset:info.offset + info.nbytes]

    def dequantize(self, name: str) -> np.ndarray:
        """The tensor as float32 of shape `TensorInfo.shape`. UnsupportedModelError for types we do not decode."""
        info = self.tensors[name]
        return _dequantize(self.raw(name), info.ggml_type, info.n_elements).reshape(info.shape)

    def close(self) -> None:
        self._data = None    # the mmap is released once no raw() view refers to it

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GGUFFile({str(self.path)!r}, v{self.version}, {len(self.metadata)} keys, "
                f"{len(self.tensors)} tensors)")


# why open() refused a path, in the user's words
_OPEN_FAILURES = {FileNotFoundError: "there is no such file (moved or deleted?)",
                  IsADirectoryError: "it is a folder, not a file", PermissionError: "this account may not read it"}
_NOT_REGULAR = "it is not a regular file (a named pipe, device or socket cannot hold a model)"
# POSIX: opening a named pipe for reading waits for a writer, forever; with O_NONBLOCK it returns at once, and
# the check after opening refuses it (the path may have been swapped for a pipe after the check before).
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def open_gguf(path: str | os.PathLike) -> GGUFFile:
    """Open and validate a GGUF file. Raises InvalidModelError for any malformed or hostile content, ModelFileError
    when the path cannot be opened at all or is not a regular file (a named pipe would block its reader)."""
    path = Path(path)
    with _open_regular_file(path) as f:
        file_size = os.fstat(f.fileno()).st_size
        _check_header_size(f.read(len(GGUF_MAGIC)), file_size)
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return _parse(path, mapped, file_size)
    except BaseException:
        mapped.close()
        raise


def _open_regular_file(path: Path):
    """The file opened for binary reading; ModelFileError, before anything is read, for a path that cannot be
    opened or is no regular file. Every model file is opened through here (library, load, estimate)."""
    try:
        _refuse_non_regular(path, os.stat(path).st_mode)     # Windows has no O_NONBLOCK: refuse before opening
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as e:
        raise _cannot_open(path, _OPEN_FAILURES.get(type(e), e.strerror or str(e))) from None
    try:
        _refuse_non_regular(path, os.fstat(fd).st_mode)
    except ModelFileError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def _refuse_non_regular(path: Path, mode: int) -> None:
    if stat.S_ISDIR(mode):
        raise _cannot_open(path, _OPEN_FAILURES[IsADirectoryError])
    if not stat.S_ISREG(mode):
        raise _cannot_open(path, _NOT_REGULAR)


def _cannot_open(path: Path, why: str) -> ModelFileError:
    return ModelFileError(f"Cannot open the model file {short_repr(str(path))}: {why}.")


def _parse(path: Path, mapped: mmap.mmap, file_size: int) -> GGUFFile:
    head = _read_header(Cursor(mapped, file_size), file_size)
    data = np.frombuffer(mapped, dtype=np.uint8)    # read-only: the map is ACCESS_READ
    return GGUFFile(path, head.version, head.alignment, head.data_offset, file_size, dict(head.metadata),
                    dict(head.tensors), data)


@dataclass(frozen=True)
class GGUFHeader:
    """Everything before the tensor data: what a remote file's first bytes tell (engine.hub reads them)."""

    version: int
    alignment: int
    data_offset: int
    file_size: int
    metadata: Mapping[str, Any]
    tensors: Mapping[str, TensorInfo]


def parse_header(prefix: bytes, file_size: int) -> GGUFHeader:
    """Validate a GGUF header from the file's first bytes `prefix`, the whole file being `file_size` bytes.

    Same checks as `open_gguf` (tensor data placed against `file_size`). A prefix too short for the header
    raises InvalidModelError like a truncated file: the caller reads more and tries again."""
    _check_header_size(prefix[:len(GGUF_MAGIC)], file_size)
    return _read_header(Cursor(prefix, min(len(prefix), file_size)), file_size)


def _check_header_size(start: bytes, file_size: int) -> None:
    """A file too short for the header is a truncated GGUF only if it starts like one: a few bytes of text are
    not "an unfinished download" but no GGUF at all (the magic says which)."""
    if file_size < _HEADER_BYTES:
        if not GGUF_MAGIC.startswith(start[:file_size]):
            raise _not_gguf(start)
        raise TruncatedModelError(f"file is {file_size} bytes, too short for a GGUF header", field="header", offset=0)


def _not_gguf(magic: bytes) -> InvalidModelError:
    return InvalidModelError(f"this file is not a GGUF model (it begins with {magic!r}, a GGUF model with b'GGUF')",
                             field="magic", offset=0)


def _read_header(cur: Cursor, file_size: int) -> GGUFHeader:
    magic = cur.take(4, "magic")
    if magic != GGUF_MAGIC:
        raise _not_gguf(magic)
    version = cur.u32("version")
    if version not in SUPPORTED_VERSIONS:
        swapped = struct.unpack("<I", struct.pack(">I", version))[0]
        if swapped in (1, *SUPPORTED_VERSIONS):
            raise InvalidModelError("big-endian GGUF files are not supported", field="version", offset=4)
        raise InvalidModelError(f"unsupported GGUF version {version}", field="version", offset=4)
    n_tensors = cur.u64("n_tensors")
    n_kv = cur.u64("n_kv")
    metadata = read_metadata(cur, n_kv)
    alignment = _alignment(metadata)
    raw_infos = read_tensor_infos(cur, n_tensors)
    data_offset = -(-cur.pos // alignment) * alignment
    if raw_infos and data_offset > file_size:
        raise TruncatedModelError("the file ends before the tensor data starts", field="data", offset=cur.pos)
    tensors = place_tensors(raw_infos, data_offset, alignment, file_size)
    check_consistency(metadata, tensors)
    return GGUFHeader(version, alignment, data_offset, file_size, MappingProxyType(metadata),
                      MappingProxyType(tensors))


def _alignment(metadata: dict) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    # bool is an int subclass; an array or string here is a malformed file too
    if type(value) is not int or not (0 < value <= MAX_ALIGNMENT) or value & (value - 1):
        raise InvalidModelError(f"general.alignment is {value!r}; it must be a power of two up to "
                                f"{MAX_ALIGNMENT}", field="general.alignment", offset=None)
    return value


__all__ = ["GGUFFile", "GGUFHeader", "open_gguf", "parse_header", "GGUFValueType"]
