"""A tiny byte-level GGUF writer for tests: every field can be set to a wrong value on purpose.

    b = GGUFBytes()
    b.kv("general.architecture", STRING, "llama")
    b.tensor("w", ne=[32, 2], ggml_type=GGMLType.F32)
    data = b.build()                       # a valid file
    data = b.build(n_kv=1 << 40)           # the same file with a lying header
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

from engine.gguf import BLOCK_LAYOUT, GGMLType, GGUFValueType

V = GGUFValueType
_SCALAR_FMT = {V.UINT8: "<B", V.INT8: "<b", V.UINT16: "<H", V.INT16: "<h", V.UINT32: "<I", V.INT32: "<i",
               V.FLOAT32: "<f", V.BOOL: "<B", V.UINT64: "<Q", V.INT64: "<q", V.FLOAT64: "<d"}


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def gstr(value: str | bytes, length: int | None = None) -> bytes:
    """A GGUF string; `length` overrides the stored length prefix."""
    raw = value.encode() if isinstance(value, str) else value
    return u64(len(raw) if length is None else length) + raw


def value_bytes(vtype: int, value) -> bytes:
    if vtype == V.STRING:
        return gstr(value)
    if vtype == V.ARRAY:
        elem_type, items = value
        return u32(elem_type) + u64(len(items)) + b"".join(value_bytes(elem_type, item) for item in items)
    return struct.pack(_SCALAR_FMT[V(vtype)], value)


def kv_bytes(key: str | bytes, vtype: int, value) -> bytes:
    return gstr(key) + u32(vtype) + value_bytes(vtype, value)


@dataclass
class Tensor:
    name: str | bytes
    ne: list[int]
    ggml_type: int
    offset: int | None = None      # relative to the data section; None = next aligned slot
    data: bytes | None = None      # None = zeros of the right size
    n_dims: int | None = None      # None = len(ne)


@dataclass
class GGUFBytes:
    version: int = 3
    alignment: int = 32            # the layout the builder uses; set general.alignment to match
    kvs: list[bytes] = field(default_factory=list)
    tensors: list[Tensor] = field(default_factory=list)

    def kv(self, key, vtype, value) -> GGUFBytes:
        self.kvs.append(kv_bytes(key, vtype, value))
        return self

    def raw_kv(self, raw: bytes) -> GGUFBytes:
        self.kvs.append(raw)
        return self

    def tensor(self, name, ne, ggml_type=GGMLType.F32, **kw) -> GGUFBytes:
        self.tensors.append(Tensor(name, list(ne), int(ggml_type), **kw))
        return self

    def build(self, *, magic: bytes = b"GGUF", n_tensors: int | None = None, n_kv: int | None = None,
              header_only: bool = False) -> bytes:
        """The file's bytes; `header_only`: up to the (aligned) start of the data section, for a caller that
        writes or reserves the data itself (a sparse file of real size, say)."""
        header = (magic + u32(self.version) + u64(len(self.tensors) if n_tensors is None else n_tensors)
                  + u64(len(self.kvs) if n_kv is None else n_kv))
        infos, blobs, cursor = [], [], 0
        for t in self.tensors:
            size = _nbytes(t.ne, t.ggml_type)
            offset = cursor if t.offset is None else t.offset
            infos.append(gstr(t.name) + u32(len(t.ne) if t.n_dims is None else t.n_dims)
                         + b"".join(u64(d) for d in t.ne) + u32(t.ggml_type) + u64(offset))
            blobs.append((offset, t.data if t.data is not None else bytes(size)))
            cursor = _align(max(cursor, offset + size), self.alignment)
        head = header + b"".join(self.kvs) + b"".join(infos)
        data_start = _align(len(head), self.alignment) if self.tensors else len(head)
        if header_only:
            return head + bytes(data_start - len(head))
        blobs = [(o, b) for o, b in blobs if o + len(b) <= 1 << 20]   # a lying offset gets no data
        data = bytearray(max((o + len(b) for o, b in blobs), default=0))
        for offset, blob in blobs:
            data[offset:offset + len(blob)] = blob
        return head + bytes(data_start - len(head)) + bytes(data)


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _nbytes(ne: list[int], ggml_type: int) -> int:
    try:
        block_size, block_bytes = BLOCK_LAYOUT[GGMLType(ggml_type)]
    except ValueError:
        block_size, block_bytes = 1, 4
    n = 1
    for d in ne:
        n *= d
    return max(0, min(n // block_size * block_bytes, 1 << 16))   # capped: lying dims must not allocate


def minimal_model(**overrides) -> GGUFBytes:
    """A small self-consistent llama-shaped file: 2 blocks, n_embd 64, 4 heads (2 kv), 8-token vocab.

    `overrides` replace metadata values by key with dots written as "__":
    minimal_model(llama__block_count=(V.UINT32, 1)).
    """
    kvs = {
        "general.architecture": (V.STRING, "llama"),
        "llama.block_count": (V.UINT32, 2),
        "llama.embedding_length": (V.UINT32, 64),
        "llama.context_length": (V.UINT32, 128),
        "llama.attention.head_count": (V.UINT32, 4),
        "llama.attention.head_count_kv": (V.UINT32, 2),
        "llama.rope.freq_base": (V.FLOAT32, 10000.0),
        "tokenizer.ggml.tokens": (V.ARRAY, (V.STRING, [f"t{i}" for i in range(7)] + ["é"])),
        "tokenizer.ggml.scores": (V.ARRAY, (V.FLOAT32, [0.5] * 8)),
        "tokenizer.ggml.bos_token_id": (V.UINT32, 1),
    }
    kvs.update({key.replace("__", "."): value for key, value in overrides.items()})
    b = GGUFBytes()
    for key, (vtype, value) in kvs.items():
        b.kv(key, vtype, value)
    b.tensor("token_embd.weight", [64, 8], GGMLType.Q8_0)
    for i in range(2):
        b.tensor(f"blk.{i}.attn_norm.weight", [64], GGMLType.F32)
        b.tensor(f"blk.{i}.attn_q.weight", [64, 64], GGMLType.Q4_0)
        b.tensor(f"blk.{i}.attn_k.weight", [64, 32], GGMLType.F16)
    return b
