"""Parse the key/value section of a GGUF file.

Values come back as: int, float, bool, str for scalars; a StringArray (engine.gguf.strings: a
Sequence[str] over one UTF-8 blob) for string arrays; and a read-only
1-D numpy array (dtype from the file: uint8 .. float64, bool for BOOL) for every numeric or bool array,
whatever its length. Nested arrays are refused (no real model uses them and they are a recursion hazard).
"""
from __future__ import annotations

import struct

import numpy as np

from engine.errors import InvalidModelError, TruncatedModelError
from engine.gguf.cursor import Cursor
from engine.gguf.strings import StringArray
from engine.gguf.types import (
    MAX_ARRAY_LEN,
    MAX_KEY_BYTES,
    MAX_KV,
    MAX_STRING_BYTES,
    SCALAR_DTYPE,
    GGUFValueType,
)

# numpy dtype letter -> struct format letter, for reading one scalar without building an array.
_STRUCT_CODE = {"u1": "B", "i1": "b", "u2": "H", "i2": "h", "u4": "I", "i4": "i",
                "u8": "Q", "i8": "q", "f4": "f", "f8": "d"}
_SCALAR_STRUCT = {vt: struct.Struct("<" + _STRUCT_CODE[dt[1:]]) for vt, dt in SCALAR_DTYPE.items()}
# Smallest encoding of one KV pair: key length (8) + value type (4) + a 1-byte value.
_MIN_KV_BYTES = 13


def read_metadata(cur: Cursor, n_kv: int) -> dict:
    """Read `n_kv` pairs at `cur`; returns a dict in file order."""
    if n_kv > MAX_KV:
        raise InvalidModelError(f"metadata count {n_kv} is over the cap of {MAX_KV}", field="n_kv", offset=16)
    if n_kv * _MIN_KV_BYTES > cur.remaining:
        raise TruncatedModelError(f"metadata count {n_kv} is more than the rest of the file could hold",
                                  field="n_kv", offset=16)
    metadata: dict = {}
    for index in range(n_kv):
        key_at = cur.pos
        key = cur.string(f"metadata key #{index}", MAX_KEY_BYTES)
        if not key:
            raise InvalidModelError("metadata key is empty", field=f"metadata key #{index}", offset=key_at)
        if key in metadata:
            raise InvalidModelError(f"metadata key {key!r} appears twice", field=key, offset=key_at)
        metadata[key] = read_value(cur, _value_type(cur, key), key)
    return metadata


def _value_type(cur: Cursor, field: str) -> GGUFValueType:
    at = cur.pos
    raw = cur.u32(field)
    try:
        return GGUFValueType(raw)
    except ValueError:
        raise InvalidModelError(f"unknown metadata value type {raw}", field=field, offset=at) from None


def read_value(cur: Cursor, vtype: GGUFValueType, field: str):
    if vtype == GGUFValueType.STRING:
        return cur.string(field, MAX_STRING_BYTES)
    if vtype == GGUFValueType.ARRAY:
        return _read_array(cur, field)
    at = cur.pos
    value = cur.unpack(_SCALAR_STRUCT[vtype], field)
    if vtype == GGUFValueType.BOOL:
        if value > 1:
            raise InvalidModelError(f"bool value is {value}, not 0 or 1", field=field, offset=at)
        return bool(value)
    return value


def _read_array(cur: Cursor, field: str):
    at = cur.pos
    elem_type = _value_type(cur, field)
    count = cur.u64(field)
    if elem_type == GGUFValueType.ARRAY:
        raise InvalidModelError("nested arrays are not allowed", field=field, offset=at)
    min_elem_bytes = 8 if elem_type == GGUFValueType.STRING else np.dtype(SCALAR_DTYPE[elem_type]).itemsize
    if count > MAX_ARRAY_LEN:
        raise InvalidModelError(f"array of {count} elements is over the cap of {MAX_ARRAY_LEN}",
                                field=field, offset=at + 4)
    if count * min_elem_bytes > cur.remaining:
        raise TruncatedModelError(f"array of {count} elements is longer than the rest of the file",
                                  field=field, offset=at + 4)
    if elem_type == GGUFValueType.STRING:
        return _read_string_array(cur, count, field)
    dtype = np.dtype(SCALAR_DTYPE[elem_type])
    data = cur.take(count * dtype.itemsize, field)
    array = np.frombuffer(data, dtype=dtype)    # over an immutable bytes copy: read-only
    if elem_type == GGUFValueType.BOOL:
        if count and array.max() > 1:
            raise InvalidModelError("bool array holds a value other than 0 or 1", field=field, offset=at)
        array = array.view(np.bool_)
    return array


def _read_string_array(cur: Cursor, count: int, field: str) -> StringArray:
    array, cur.pos = StringArray.parse(cur.buf, cur.pos, cur.size, count, field)
    return array
