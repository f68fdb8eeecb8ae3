"""Rewrite a valid GGUF's metadata with values of any type: the raw material of the metadata-type sweep and
the fuzz command (engine.gguf.fuzz). Tensor infos and data are copied unchanged.

    data = with_metadata(Path("tiny.gguf").read_bytes(), {"general.name": (GGUFValueType.ARRAY,
                         (GGUFValueType.UINT8, [1, 2]))})      # None as the value deletes the key
"""
from __future__ import annotations

import struct
from typing import Any

import numpy as np

from engine.gguf.cursor import Cursor
from engine.gguf.metadata import read_metadata
from engine.gguf.strings import StringArray
from engine.gguf.tensors import read_tensor_infos
from engine.gguf.types import DEFAULT_ALIGNMENT, GGUFValueType

V = GGUFValueType
_FORMAT = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
           V.FLOAT32: "<f", V.BOOL: "<B", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d"}
_NUMPY_TYPE = {"uint8": V.UINT8, "int8": V.INT8, "uint16": V.UINT16, "int16": V.INT16, "uint32": V.UINT32,
               "int32": V.INT32, "float32": V.FLOAT32, "bool": V.BOOL, "uint64": V.UINT64, "int64": V.INT64,
               "float64": V.FLOAT64}
Typed = tuple[int, Any]    # (GGUFValueType, value); arrays: (ARRAY, (element type, list of values))


def encode_value(vtype: int, value: Any) -> bytes:
    if vtype == V.STRING:
        raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(raw)) + raw
    if vtype == V.ARRAY:
        elem_type, items = value
        return (struct.pack("<IQ", elem_type, len(items))
                + b"".join(encode_value(elem_type, item) for item in items))
    return struct.pack(_FORMAT[V(vtype)], value)


def typed(value: Any) -> Typed:
    """The (type, value) a parsed metadata value was most likely written with."""
    if isinstance(value, bool):
        return V.BOOL, value
    if isinstance(value, int):
        return (V.INT64 if value < 0 else V.UINT32 if value < 1 << 32 else V.UINT64), value
    if isinstance(value, float):
        return V.FLOAT32, value
    if isinstance(value, str):
        return V.STRING, value
    if isinstance(value, StringArray | list):
        return V.ARRAY, (V.STRING, list(value))
    if isinstance(value, np.ndarray):
        return V.ARRAY, (_NUMPY_TYPE[value.dtype.name], value.tolist())
    raise TypeError(f"no GGUF type for {type(value).__name__}")


def split(data: bytes) -> tuple[dict[str, Any], bytes, bytes, int]:
    """(metadata, tensor-info bytes, tensor-data bytes, n_tensors) of a valid file."""
    cur = Cursor(data, len(data))
    cur.pos = 16
    n_kv = cur.u64("n_kv")
    n_tensors = struct.unpack_from("<Q", data, 8)[0]
    metadata = read_metadata(cur, n_kv)
    infos_start = cur.pos
    read_tensor_infos(cur, n_tensors)
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    data_start = -(-cur.pos // alignment) * alignment
    return metadata, data[infos_start:cur.pos], data[data_start:], n_tensors


def with_metadata(data: bytes, changes: dict[str, Typed | None]) -> bytes:
    """`data` (a valid GGUF) with keys replaced, added, or (value None) removed."""
    metadata, infos, tensor_data, n_tensors = split(data)
    entries: dict[str, Typed] = {key: typed(value) for key, value in metadata.items()}
    for key, change in changes.items():
        if change is None:
            entries.pop(key, None)
        else:
            entries[key] = change
    kv = b"".join(encode_value(V.STRING, key) + struct.pack("<I", vtype) + encode_value(vtype, value)
                  for key, (vtype, value) in entries.items())
    head = b"GGUF" + struct.pack("<IQQ", 3, n_tensors, len(entries)) + kv + infos
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    return head + bytes(-len(head) % alignment) + tensor_data
