"""K-quant decoders (super-blocks of 256 elements), vectorized over (n_blocks, bytes_per_block) uint8.

Element order inside a super-block follows ggml's dequantize_row_q*_K; the comments give each layout.
Arithmetic is float32 in the reference's order (scale products first), so results are bit-exact.
Each decoder writes float32 into `out` of shape (n_blocks, 256) with its last operation.
"""
from __future__ import annotations

import numpy as np

from engine.gguf.types import GGMLType

QK_K = 256
_F16 = np.dtype("<f2")
_SHIFT_2BIT = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
_SHIFT_4BIT = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
_SHIFT_1BIT = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)


def _f16(column: np.ndarray) -> np.ndarray:
    """(n, 2) uint8 -> (n, 1) float32."""
    return column.copy().view(_F16).astype(np.float32)


def _crumbs(qs: np.ndarray) -> np.ndarray:
    """(n, 64) bytes -> (n, 256) 2-bit values. Element 128*h + 32*j + l = (qs[32*h + l] >> 2*j) & 3."""
    n = qs.shape[0]
    return ((qs.reshape(n, 2, 1, 32) >> _SHIFT_2BIT) & 3).reshape(n, QK_K)


def _bits(mask: np.ndarray) -> np.ndarray:
    """(n, 32) bytes -> (n, 256) bits. Element 32*i + l = (mask[l] >> i) & 1."""
    n = mask.shape[0]
    return ((mask.reshape(n, 1, 32) >> _SHIFT_1BIT) & 1).reshape(n, QK_K)


def _q2_k(b: np.ndarray, out: np.ndarray) -> None:
    # scales[16] (low nibble: scale, high nibble: min, per 16 elements) | qs[64] | d f16 | dmin f16
    n = b.shape[0]
    scales = b[:, 0:16]
    d, dmin = _f16(b[:, 80:82]), _f16(b[:, 82:84])
    dl = (d * (scales & 0x0F).astype(np.float32)).reshape(n, 16, 1)
    ml = (dmin * (scales >> 4).astype(np.float32)).reshape(n, 16, 1)
    q = _crumbs(b[:, 16:80]).reshape(n, 16, 16).astype(np.float32)
    out3 = out.reshape(n, 16, 16)
    np.multiply(dl, q, out=out3)
    out3 -= ml


def _q3_k_scales(packed: np.ndarray) -> np.ndarray:
    """(n, 12) bytes -> (n, 16) signed 6-bit scales. Scale i has low 4 bits from
    byte i % 8 (nibble i // 8) and high 2 bits from byte 8 + i % 4 (bit pair i // 4); stored with +32."""
    n = packed.shape[0]
    low = (packed[:, 0:8].reshape(n, 1, 8) >> _SHIFT_4BIT.reshape(1, 2, 1)) & 0x0F     # (n, 2, 8)
    high = (packed[:, 8:12].reshape(n, 1, 4) >> _SHIFT_2BIT.reshape(1, 4, 1)) & 0x03   # (n, 4, 4)
    six_bit = low.reshape(n, 16) | (high.reshape(n, 16) << 4)
    return six_bit.astype(np.int8) - np.int8(32)


def _q3_k(b: np.ndarray, out: np.ndarray) -> None:
    # hmask[32] | qs[64] | scales[12] | d f16. q = low 2 bits - 4 where the hmask bit is 0.
    n = b.shape[0]
    d = _f16(b[:, 108:110])
    dl = (d * _q3_k_scales(b[:, 96:108]).astype(np.float32)).reshape(n, 16, 1)
    # low | hbit << 2 is in 0..7; minus 4 gives low - (hbit ? 0 : 4)
    code = (_crumbs(b[:, 32:96]) | (_bits(b[:, 0:32]) << 2)).view(np.int8) - np.int8(4)
    q = code.reshape(n, 16, 16).astype(np.float32)
    np.multiply(dl, q, out=out.reshape(n, 16, 16))


def _k4_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(n, 12) bytes -> 8 six-bit scales and 8 six-bit mins (get_scale_min_k4).
    j < 4: scale = p[j] & 63, min = p[j+4] & 63;
    j >= 4: scale = (p[j+4] & 15) | (p[j-4] >> 6) << 4, min = (p[j+4] >> 4) | (p[j] >> 6) << 4."""
    p0, p1, p2 = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([p0 & 63, (p2 & 15) | ((p0 >> 6) << 4)], axis=1)
    mins = np.concatenate([p1 & 63, (p2 >> 4) | ((p1 >> 6) << 4)], axis=1)
    return scales, mins


def _nibbles_k(qs: np.ndarray) -> np.ndarray:
    """(n, 128) bytes -> (n, 256). Element 64*c + 32*h + l = (qs[32*c + l] >> 4*h) & 15."""
    n = qs.shape[0]
    return ((qs.reshape(n, 4, 1, 32) >> _SHIFT_4BIT) & 0x0F).reshape(n, QK_K)


def _scaled(b: np.ndarray, q: np.ndarray, out: np.ndarray) -> None:
    """Shared tail of Q4_K / Q5_K: d f16 | dmin f16 | scales[12] at the start of each block."""
    n = b.shape[0]
    d, dmin = _f16(b[:, 0:2]), _f16(b[:, 2:4])
    scales, mins = _k4_scales_mins(b[:, 4:16])
    dl = (d * scales.astype(np.float32)).reshape(n, 8, 1)
    ml = (dmin * mins.astype(np.float32)).reshape(n, 8, 1)
    out3 = out.reshape(n, 8, 32)
    np.multiply(dl, q.reshape(n, 8, 32).astype(np.float32), out=out3)
    out3 -= ml


def _q4_k(b: np.ndarray, out: np.ndarray) -> None:
    # d | dmin | scales[12] | qs[128]
    _scaled(b, _nibbles_k(b[:, 16:144]), out)


def _q5_k(b: np.ndarray, out: np.ndarray) -> None:
    # d | dmin | scales[12] | qh[32] | qs[128]; bit 4 of element e is (qh[e % 32] >> e // 32) & 1
    _scaled(b, _nibbles_k(b[:, 48:176]) | (_bits(b[:, 16:48]) << 4), out)


def _q6_k(b: np.ndarray, out: np.ndarray) -> None:
    # ql[128] | qh[64] | scales[16] int8 | d f16. For half h (128 elements), l in 0..31:
    #   elements 128h + 32k + l, k = 0..3: low nibble of ql[64h + l + 32*(k&1)] (high nibble when k >= 2),
    #   high 2 bits = (qh[32h + l] >> 2k) & 3; value minus 32; one scale per 16 elements.
    n = b.shape[0]
    ql = b[:, 0:128].reshape(n, 2, 1, 64)
    low = ((ql >> _SHIFT_4BIT) & 0x0F).reshape(n, 2, 4, 32)             # k order: (nibble, ql half)
    high = ((b[:, 128:192].reshape(n, 2, 1, 32) >> _SHIFT_2BIT) & 3)    # (n, 2, 4, 32)
    q = ((low | (high << 4)).view(np.int8) - np.int8(32)).reshape(n, 16, 16).astype(np.float32)
    d = _f16(b[:, 208:210])
    dl = (d * b[:, 192:208].view(np.int8).astype(np.float32)).reshape(n, 16, 1)
    np.multiply(dl, q, out=out.reshape(n, 16, 16))


KQUANT_DECODERS = {
    GGMLType.Q2_K: _q2_k,
    GGMLType.Q3_K: _q3_k,
    GGMLType.Q4_K: _q4_k,
    GGMLType.Q5_K: _q5_k,
    GGMLType.Q6_K: _q6_k,
}
