"""Dequantization to float32: one small vectorized function per type over (n_blocks, bytes_per_block).

Each function takes a uint8 array of shape (n_blocks, bytes_per_block) and writes float32 into `out` of
shape (n_blocks, block_size) (its last operation writes there, saving a pass over the output). Arithmetic follows ggml's reference C (dequantize_row_*) step by step in
float32 (no fused multiply-add), so results are bit-exact with it and with gguf.quants.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from engine.errors import UnsupportedModelError
from engine.gguf.kquants import KQUANT_DECODERS
from engine.gguf.types import BLOCK_LAYOUT, GGMLType

_F16 = np.dtype("<f2")
_LOW_HIGH = np.array([0, 4], dtype=np.uint8).reshape(1, 2, 1)     # nibble shifts
_BIT = np.arange(32, dtype=np.uint32).reshape(1, 32)               # qh bit j belongs to element j
_CHUNK_BLOCKS = 1 << 15     # bounds temporaries to a few MB whatever the tensor size


def _f16(column: np.ndarray) -> np.ndarray:
    """(n_blocks, 2) uint8 -> (n_blocks, 1) float32."""
    return column.copy().view(_F16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """(n, 16) packed bytes -> (n, 32) uint8: elements 0..15 are low nibbles, 16..31 high nibbles."""
    return ((qs[:, None, :] >> _LOW_HIGH) & 0x0F).reshape(qs.shape[0], 32)


def _fifth_bits(qh: np.ndarray) -> np.ndarray:
    """(n, 4) little-endian uint32 -> (n, 32) uint8 holding bit j for element j, shifted to bit 4."""
    word = qh.copy().view("<u4")                       # (n, 1)
    return (((word >> _BIT) & 1) << 4).astype(np.uint8)


def _signed(codes: np.ndarray, offset: int) -> np.ndarray:
    """uint8 codes (< 128) minus `offset`, as float32: subtract in int8 first, the cheapest width."""
    return (codes.view(np.int8) - np.int8(offset)).astype(np.float32)



def _q4_0(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(_f16(b[:, 0:2]), _signed(_nibbles(b[:, 2:18]), 8), out=out)


def _q4_1(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(_f16(b[:, 0:2]), _nibbles(b[:, 4:20]).astype(np.float32), out=out)
    out += _f16(b[:, 2:4])


def _q5_0(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(_f16(b[:, 0:2]), _signed(_nibbles(b[:, 6:22]) | _fifth_bits(b[:, 2:6]), 16), out=out)


def _q5_1(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(_f16(b[:, 0:2]), (_nibbles(b[:, 8:24]) | _fifth_bits(b[:, 4:8])).astype(np.float32), out=out)
    out += _f16(b[:, 2:4])


def _q8_0(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(b[:, 2:34].view(np.int8), _f16(b[:, 0:2]), out=out)


# MXFP4 (gpt-oss experts): 32 e2m1 values of 4 bits and one shared e8m0 exponent byte per block. ggml keeps
# the e2m1 values doubled (so they are integers) and halves the scale instead: scale = 2^(e - 128), whose f32
# bits are (e - 1) << 23, or the subnormal 0x00200000 << e for e < 2.
_E2M1_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)


def _e8m0_half(e: np.ndarray) -> np.ndarray:
    """(n, 1) uint8 exponents -> (n, 1) float32 scales 2^(e - 128)."""
    e = e.astype(np.uint32)
    return np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << np.uint32(23)).astype(np.uint32).view(np.float32)


def _mxfp4(b: np.ndarray, out: np.ndarray) -> None:
    np.multiply(_e8m0_half(b[:, 0:1]), _E2M1_DOUBLED[_nibbles(b[:, 1:17])], out=out)


def _f32(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = b.view("<f4")


def _f16_type(b: np.ndarray, out: np.ndarray) -> None:
    out[...] = b.view(_F16)


def _bf16(b: np.ndarray, out: np.ndarray) -> None:
    # bf16 is the top half of an f32: widen and shift into place
    np.left_shift(b.view("<u2"), 16, out=out.view(np.uint32), dtype=np.uint32)


DECODERS: dict[GGMLType, Callable[[np.ndarray, np.ndarray], None]] = {
    GGMLType.F32: _f32,
    GGMLType.F16: _f16_type,
    GGMLType.BF16: _bf16,
    GGMLType.Q4_0: _q4_0,
    GGMLType.Q4_1: _q4_1,
    GGMLType.Q5_0: _q5_0,
    GGMLType.Q5_1: _q5_1,
    GGMLType.Q8_0: _q8_0,
    GGMLType.MXFP4: _mxfp4,
    **KQUANT_DECODERS,
}


def dequantize(raw: np.ndarray, ggml_type: GGMLType, n_elements: int) -> np.ndarray:
    """Decode `n_elements` values of `ggml_type` from the uint8 buffer `raw`; returns flat float32.

    Raises UnsupportedModelError naming the type if we have no decoder for it, ValueError if `raw`
    is not exactly the size `n_elements` needs.
    """
    ggml_type = GGMLType(ggml_type)
    decoder = DECODERS.get(ggml_type)
    if decoder is None:
        raise UnsupportedModelError(f"tensor type {ggml_type.name} is not supported by this engine "
                                    f"(supported: {', '.join(t.name for t in DECODERS)})")
    block_size, block_bytes = BLOCK_LAYOUT[ggml_type]
    if n_elements % block_size:
        raise ValueError(f"{n_elements} elements is not a whole number of {ggml_type.name} blocks")
    n_blocks = n_elements // block_size
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if raw.size != n_blocks * block_bytes:
        raise ValueError(f"{ggml_type.name}: {n_elements} elements need {n_blocks * block_bytes} bytes, got {raw.size}")
    blocks = raw.reshape(n_blocks, block_bytes)
    out = np.empty((n_blocks, block_size), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):   # inf/NaN scales in a file decode as inf/NaN
        for start in range(0, n_blocks, _CHUNK_BLOCKS):
            stop = min(start + _CHUNK_BLOCKS, n_blocks)
            decoder(blocks[start:stop], out[start:stop])
    return out.reshape(-1)


# Byte offset of each block's float16 scale fields (d, and dmin or m where the type has one). With finite
# scales every decoded value is finite (small integers times them stay far inside float32), and a non-finite
# scale makes its whole block non-finite: so the scales alone answer "does this tensor decode to finite
# values", without decoding it. That keeps a quantized matrix's load as cheap as its map.
F16_SCALE_OFFSETS: dict[GGMLType, tuple[int, ...]] = {
    GGMLType.Q4_0: (0,), GGMLType.Q4_1: (0, 2), GGMLType.Q5_0: (0,), GGMLType.Q5_1: (0, 2),
    GGMLType.Q8_0: (0,), GGMLType.Q2_K: (80, 82), GGMLType.Q3_K: (108,), GGMLType.Q4_K: (0, 2),
    GGMLType.Q5_K: (0, 2), GGMLType.Q6_K: (208,),
}
_F16_EXPONENT, _BF16_EXPONENT, _F32_EXPONENT = 0x7C00, 0x7F80, 0x7F800000   # all ones: inf or NaN
_SCAN_BYTES = 1 << 19                 # bounds the scan's one temporary per chunk to 512 KiB


def _exponent_all_ones(words: np.ndarray, exponent: int, width: int) -> bool:
    """Whether some `width`-byte float in `words` (unsigned words of one or two such floats, any stride) has its
    exponent bits all ones. A float | ~exponent is all ones exactly then, so a max answers with no mask array."""
    all_ones = (1 << 8 * width) - 1
    not_exponent = words.dtype.type(~exponent & ((1 << 8 * words.itemsize) - 1))
    step = _SCAN_BYTES // words.itemsize
    return any((words[i:i + step] | not_exponent).view(f"<u{width}").max() == all_ones
               for i in range(0, len(words), step))


def decodes_finite(raw: np.ndarray, ggml_type: GGMLType) -> bool | None:
    """Whether the tensor bytes `raw` (flat uint8) decode to finite values only; None for types this cannot
    tell without decoding (MXFP4's power-of-two scales; the types this engine only decodes to float32, whose
    loader checks the decoded values). Reads only the scale bytes of quantized types."""
    if ggml_type == GGMLType.F32:
        return not _exponent_all_ones(raw.view("<u4"), _F32_EXPONENT, 4)
    if ggml_type in (GGMLType.F16, GGMLType.BF16):
        return not _exponent_all_ones(raw.view("<u2"), _F16_EXPONENT if ggml_type == GGMLType.F16 else
                                      _BF16_EXPONENT, 2)
    offsets = F16_SCALE_OFFSETS.get(ggml_type)
    if offsets is None:
        return None
    block_bytes = BLOCK_LAYOUT[ggml_type][1]
    n = len(raw) // block_bytes
    # One scale word a block, a block apart: the scan is bound by those strided reads, so two adjacent scales
    # (d, dmin) are read as one 32-bit word, in one pass.
    if len(offsets) == 2 and offsets[1] == offsets[0] + 2:
        words = [np.ndarray((n,), "<u4", raw, offsets[0], (block_bytes,))]
    else:
        words = [np.ndarray((n,), "<u2", raw, off, (block_bytes,)) for off in offsets]
    return not any(_exponent_all_ones(w, _F16_EXPONENT * 0x10001 if w.itemsize == 4 else _F16_EXPONENT, 2)
                   for w in words)
