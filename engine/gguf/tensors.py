"""Tensor infos: parse each record, then check the layout of all of them against the file."""
from __future__ import annotations

import math
from dataclasses import dataclass

from engine.errors import InvalidModelError, TruncatedModelError
from engine.gguf.cursor import Cursor
from engine.gguf.types import (
    BLOCK_LAYOUT,
    MAX_DIM,
    MAX_DIMS,
    MAX_TENSOR_NAME_BYTES,
    MAX_TENSORS,
    GGMLType,
)

# Smallest tensor info: name length (8) + n_dims (4) + one dim (8) + type (4) + offset (8).
_MIN_TENSOR_INFO_BYTES = 32


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's record. `shape` is numpy order (reversed ggml `ne`): a weight stored with
    ne=[n_in, n_out] has shape (n_out, n_in), rows contiguous. `offset` is absolute in the file."""

    name: str
    ggml_type: GGMLType
    shape: tuple[int, ...]
    ne: tuple[int, ...]
    offset: int
    nbytes: int
    n_elements: int


@dataclass(frozen=True)
class _RawInfo:
    name: str
    ggml_type: GGMLType
    ne: tuple[int, ...]
    rel_offset: int
    at: int           # file offset of the record, for error messages


def read_tensor_infos(cur: Cursor, n_tensors: int) -> list[_RawInfo]:
    if n_tensors > MAX_TENSORS:
        raise InvalidModelError(f"tensor count {n_tensors} is over the cap of {MAX_TENSORS}",
                                field="n_tensors", offset=8)
    if n_tensors * _MIN_TENSOR_INFO_BYTES > cur.remaining:
        raise TruncatedModelError(f"tensor count {n_tensors} is more than the rest of the file could hold",
                                  field="n_tensors", offset=8)
    infos: list[_RawInfo] = []
    seen: set[str] = set()
    for index in range(n_tensors):
        at = cur.pos
        name = cur.string(f"tensor #{index} name", MAX_TENSOR_NAME_BYTES)
        if not name:
            raise InvalidModelError("tensor name is empty", field=f"tensor #{index} name", offset=at)
        if name in seen:
            raise InvalidModelError(f"tensor name {name!r} appears twice", field=name, offset=at)
        seen.add(name)
        infos.append(_read_one(cur, name, at))
    return infos


def _read_one(cur: Cursor, name: str, at: int) -> _RawInfo:
    dims_at = cur.pos
    n_dims = cur.u32(f"{name}.n_dims")
    if not 1 <= n_dims <= MAX_DIMS:
        raise InvalidModelError(f"tensor has {n_dims} dimensions; 1 to {MAX_DIMS} are allowed",
                                field=f"{name}.n_dims", offset=dims_at)
    ne = []
    for axis in range(n_dims):
        dim_at = cur.pos
        dim = cur.u64(f"{name}.ne[{axis}]")
        if not 1 <= dim <= MAX_DIM:   # 0, or a negative int64 read as a huge uint64
            raise InvalidModelError(f"dimension {axis} is {dim if dim < 1 << 63 else dim - (1 << 64)}; it must "
                                    f"be between 1 and {MAX_DIM}", field=f"{name}.ne[{axis}]", offset=dim_at)
        ne.append(dim)
    type_at = cur.pos
    raw_type = cur.u32(f"{name}.type")
    try:
        ggml_type = GGMLType(raw_type)
    except ValueError:
        raise InvalidModelError(f"unknown tensor type {raw_type}", field=f"{name}.type", offset=type_at) from None
    block_size = BLOCK_LAYOUT[ggml_type][0]
    if ne[0] % block_size:
        raise InvalidModelError(f"first dimension {ne[0]} is not a multiple of the {ggml_type.name} block "
                                f"size {block_size}", field=f"{name}.ne[0]", offset=dims_at + 4)
    rel_offset = cur.u64(f"{name}.offset")
    return _RawInfo(name, ggml_type, tuple(ne), rel_offset, at)


def place_tensors(raw: list[_RawInfo], data_offset: int, alignment: int, file_size: int) -> dict[str, TensorInfo]:
    """Turn records into TensorInfos; every tensor must be aligned, inside the file and not overlap another.

    All sizes are Python ints, so no product or sum can wrap around.
    """
    placed: dict[str, TensorInfo] = {}
    for r in raw:
        n_elements = math.prod(r.ne)
        block_size, block_bytes = BLOCK_LAYOUT[r.ggml_type]
        nbytes = n_elements // block_size * block_bytes
        if r.rel_offset % alignment:
            raise InvalidModelError(f"tensor data offset {r.rel_offset} is not a multiple of the alignment "
                                    f"{alignment}", field=f"{r.name}.offset", offset=r.at)
        start = data_offset + r.rel_offset
        if start + nbytes > file_size:
            raise TruncatedModelError(f"tensor data ({nbytes} bytes at {start}) runs past the end of the file "
                                      f"({file_size} bytes)", field=f"{r.name}.offset", offset=r.at)
        placed[r.name] = TensorInfo(r.name, r.ggml_type, tuple(reversed(r.ne)), r.ne, start, nbytes, n_elements)
    _check_no_overlap(placed, raw)
    return placed


def _check_no_overlap(placed: dict[str, TensorInfo], raw: list[_RawInfo]) -> None:
    at = {r.name: r.at for r in raw}
    previous: TensorInfo | None = None
    for info in sorted(placed.values(), key=lambda t: (t.offset, t.nbytes)):
        if previous is not None and info.offset < previous.offset + previous.nbytes:
            raise InvalidModelError(f"tensor data overlaps that of {previous.name!r}",
                                    field=f"{info.name}.offset", offset=at[info.name])
        previous = info
