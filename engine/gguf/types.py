"""GGUF and ggml type ids, block layouts and the caps the parser enforces.

Ids and layouts are facts of the file format (ggml.h / gguf-py constants); a unit test checks them
against the `gguf` package so a drift would be caught.
"""
from __future__ import annotations

from enum import IntEnum


class GGMLType(IntEnum):
    """Tensor element type ids as stored in a GGUF tensor info (ggml_type)."""

    F32 = 0
    F16 = 1
    Q4_0 = 2
    Q4_1 = 3
    Q5_0 = 6
    Q5_1 = 7
    Q8_0 = 8
    Q8_1 = 9
    Q2_K = 10
    Q3_K = 11
    Q4_K = 12
    Q5_K = 13
    Q6_K = 14
    Q8_K = 15
    IQ2_XXS = 16
    IQ2_XS = 17
    IQ3_XXS = 18
    IQ1_S = 19
    IQ4_NL = 20
    IQ3_S = 21
    IQ2_S = 22
    IQ4_XS = 23
    I8 = 24
    I16 = 25
    I32 = 26
    I64 = 27
    F64 = 28
    IQ1_M = 29
    BF16 = 30
    TQ1_0 = 34
    TQ2_0 = 35
    MXFP4 = 39


# type -> (elements per block, bytes per block). Every type the parser accepts has a layout, so the
# byte size of any tensor is known at parse time even when we cannot dequantize it.
BLOCK_LAYOUT: dict[GGMLType, tuple[int, int]] = {
    GGMLType.F32: (1, 4),
    GGMLType.F16: (1, 2),
    GGMLType.Q4_0: (32, 18),
    GGMLType.Q4_1: (32, 20),
    GGMLType.Q5_0: (32, 22),
    GGMLType.Q5_1: (32, 24),
    GGMLType.Q8_0: (32, 34),
    GGMLType.Q8_1: (32, 40),
    GGMLType.Q2_K: (256, 84),
    GGMLType.Q3_K: (256, 110),
    GGMLType.Q4_K: (256, 144),
    GGMLType.Q5_K: (256, 176),
    GGMLType.Q6_K: (256, 210),
    GGMLType.Q8_K: (256, 292),
    GGMLType.IQ2_XXS: (256, 66),
    GGMLType.IQ2_XS: (256, 74),
    GGMLType.IQ3_XXS: (256, 98),
    GGMLType.IQ1_S: (256, 50),
    GGMLType.IQ4_NL: (32, 18),
    GGMLType.IQ3_S: (256, 110),
    GGMLType.IQ2_S: (256, 82),
    GGMLType.IQ4_XS: (256, 136),
    GGMLType.I8: (1, 1),
    GGMLType.I16: (1, 2),
    GGMLType.I32: (1, 4),
    GGMLType.I64: (1, 8),
    GGMLType.F64: (1, 8),
    GGMLType.IQ1_M: (256, 56),
    GGMLType.BF16: (1, 2),
    GGMLType.TQ1_0: (256, 54),
    GGMLType.TQ2_0: (256, 66),
    GGMLType.MXFP4: (32, 17),
}

# type -> byte offsets in a block of its float16 scale fields (d, and dmin / m where the type has one)
HALF_FIELDS: dict[GGMLType, tuple[int, ...]] = {
    GGMLType.Q4_0: (0,), GGMLType.Q4_1: (0, 2), GGMLType.Q5_0: (0,), GGMLType.Q5_1: (0, 2), GGMLType.Q8_0: (0,),
    GGMLType.Q4_K: (0, 2), GGMLType.Q5_K: (0, 2), GGMLType.Q6_K: (208,),
}


class GGUFValueType(IntEnum):
    """Metadata value type ids (gguf_type)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


# Little-endian numpy dtype strings of the fixed-size value types.
SCALAR_DTYPE: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.BOOL: "<u1",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)      # v1 used 32-bit counts and is long gone
DEFAULT_ALIGNMENT = 32
MAX_ALIGNMENT = 1 << 16          # anything larger is a hostile file, not a real layout choice

# Caps. Real models are far below each; a file above one is refused rather than trusted.
MAX_TENSORS = 1 << 16            # the largest MoE models have a few thousand tensors
MAX_KV = 1 << 16                 # real files carry < 100 keys
MAX_KEY_BYTES = 1 << 16          # the spec's own limit for keys is 65535 bytes
MAX_STRING_BYTES = 1 << 24       # 16 MiB; chat templates are tens of KB
MAX_ARRAY_LEN = 1 << 24          # vocabularies are ~262k entries, merges ~1M at most
MAX_TENSOR_NAME_BYTES = 63       # GGML_MAX_NAME is 64 including the NUL
MAX_DIMS = 4                     # GGML_MAX_DIMS
MAX_DIM = 1 << 40                # one dimension; the byte-size check against the file is the real bound
