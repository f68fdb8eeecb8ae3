"""Compiled (numba) kernels over GGUF's quantized block layouts, reading the file's memory map directly.

Per quant type three kernels (KERNELS), built from one block decoder that works eight weights at a time
(engine.model.simd8's vectors):
- `matvec(raws, x, out, f16)`: out[rows] = W @ x, W given as MATVEC_PARTS matrices `raws` [rows_p, bytes
  per row] in the file's layout whose results sit side by side in `out` (q|k|v or gate|up in one call;
  a single matrix passes NO_ROWS for the others). Each block of a row is decoded to float32 (the same
  arithmetic as engine.gguf.dequant) and multiplied by the activations in float32 into per-position
  partial sums: activations are never quantized, so the results are float32 math on the dequantized
  weights (only the summation order differs from BLAS).
  Parallel over chunks of rows (numba prange); `serial_matvec` is the same product on the calling thread.
- `dequant(raw, out, f16)`: out[rows, cols] float32, bit-exact with engine.gguf.dequantize (no fast-math,
  no fused multiply-add): used for prefill (decode a chunk of rows, then one BLAS sgemm) and embeddings.
  Serial.

`f16` is F16_TABLE: float32 value of every float16 bit pattern (256 KB, exact for subnormals, inf, NaN).

Compiled code is cached on disk under NUMBA_CACHE_DIR, which this module points at the app's cache folder
(engine.paths) unless the environment already sets it (a frozen app's own folder is read-only). numba's
cache is keyed by this file's source alone, so the folder's name carries a digest of engine.model.simd8's
source, which these kernels inline: a changed simd8 compiles afresh instead of reading stale code. In a frozen
app (no source) numba keeps it in its own user-wide cache folder keyed by the executable instead. OpenMP threads
wait passively (OMP_WAIT_POLICY) unless set otherwise: spinning threads made each parallel product ~10x slower on
cores shared with other programs (measured).
Importing this module raises ImportError when numba is missing (engine.model.quant_matrix then keeps the
numpy float32 path).
"""
from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path
from typing import NamedTuple

import numpy as np

from engine.gguf.types import BLOCK_LAYOUT, GGMLType
from engine.model.numba_cache import keep_frozen_cache_in_cache_dir, lean_cache_loads
from engine.model.quant_matrix import F16_RUN
from engine.paths import cache_dir

_SIMD8 = Path(__file__).with_name("simd8.py")
_SIMD8_DIGEST = hashlib.sha256(_SIMD8.read_bytes()).hexdigest()[:12] if _SIMD8.is_file() else "frozen"
os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir() / "numba" / _SIMD8_DIGEST))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# numba's cache is keyed by the source file; a frozen app has none, so its kernels are keyed by the module's name
# in the bundle (numba_cache.keep_frozen_cache_in_cache_dir)
CACHE = bool(getattr(sys, "frozen", False)) or (__file__.endswith(".py") and os.path.isfile(__file__))

# numba after NUMBA_CACHE_DIR is set (numba reads it at import); get_num_threads is for quant_matrix
from numba import get_num_threads, njit, prange  # noqa: E402, F401

keep_frozen_cache_in_cache_dir()           # before any kernel below (or simd8's) is decorated

from engine.model import simd8  # noqa: E402 - imports numba

NO_ROWS = np.zeros((0, 0), np.uint8)     # an unused matvec part: no rows, so no tasks
NO_ROWS.flags.writeable = False           # read-only like the map views (numba specialises on the flag)
F16_TABLE = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(np.float32)
_E2M1_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
# MXFP4's shared exponent byte e -> 2^(e - 128) (engine.gguf.dequant._e8m0_half, as a table)
_E8M0_HALF = np.where(np.arange(256) < 2, np.uint32(0x00200000) << np.arange(256, dtype=np.uint32),
                      (np.arange(256, dtype=np.uint32) - 1) << np.uint32(23)).astype(np.uint32).view(np.float32)
ROWS_PER_TASK = 16       # rows one prange iteration handles (the unit the threads share out)
MATVEC_PARTS = 3         # matrices one matvec call takes (q|k|v); always this many, so one specialisation


# ---- block decoders: block `b` of `row` (1-D uint8) -> out[k:k + block elements], float32 ---------------
# Each follows ggml's dequantize_row_* (and engine.gguf.dequant) operation by operation, eight weights at a time
# (engine.model.simd8: lanes are exact float32, so the decode stays bit-exact).

# Where eight decoded values `v` (positions j..j+7 of the block) go (the decoders' `put`): stored at
# out[k + j:k + j + 8] (dequantize), or multiplied by the activations x[k + j:k + j + 8] and added to the
# per-position partial sums out[j % 32:...] (a dot product: 32 sums in 4 vectors, so consecutive updates are
# independent; x is never quantized). Every block size is a multiple of 32.
@njit(inline="always")
def _store(out, k, j, v, x):
    simd8.store(out, k + j, v)


@njit(inline="always")
def _accumulate(out, k, j, v, x):
    at = j & 31
    simd8.store(out, at, simd8.fma(v, simd8.load(x, k + j), simd8.load(out, at)))


@njit(inline="always")
def _half(row, o, f16):
    return f16[np.int64(row[o]) | (np.int64(row[o + 1]) << 8)]


@njit(inline="always")
def _q4_0(row, srow, b, out, k, f16, x, put):
    o = b * 18
    d = _half(row, o, f16)
    for j in range(0, 16, 8):
        q = simd8.bytes8(row, o + 2 + j)
        put(out, k, j, simd8.scale(simd8.to_f32(simd8.isub(simd8.band(q, 15), 8)), d), x)
        put(out, k, j + 16, simd8.scale(simd8.to_f32(simd8.isub(simd8.shr(q, 4), 8)), d), x)


@njit(inline="always")
def _q4_1(row, srow, b, out, k, f16, x, put):
    o = b * 20
    d = _half(row, o, f16)
    m = _half(row, o + 2, f16)
    for j in range(0, 16, 8):
        q = simd8.bytes8(row, o + 4 + j)
        put(out, k, j, simd8.affine(simd8.to_f32(simd8.band(q, 15)), d, m), x)
        put(out, k, j + 16, simd8.affine(simd8.to_f32(simd8.shr(q, 4)), d, m), x)


@njit(inline="always")
def _qh32(row, o):
    return (np.uint32(row[o]) | (np.uint32(row[o + 1]) << 8) | (np.uint32(row[o + 2]) << 16)
            | (np.uint32(row[o + 3]) << 24))


@njit(inline="always")
def _five_bits(q, qh, j):
    """Q5_0/Q5_1 quants of positions j..j+7 and j+16..j+23 (j < 16): nibbles of `q`, fifth bit from `qh`."""
    lo = simd8.bor(simd8.band(q, 15), simd8.shl(simd8.bits8(qh, j), 4))
    hi = simd8.bor(simd8.shr(q, 4), simd8.shl(simd8.bits8(qh, j + 16), 4))
    return lo, hi


@njit(inline="always")
def _q5_0(row, srow, b, out, k, f16, x, put):
    o = b * 22
    d = _half(row, o, f16)
    qh = _qh32(row, o + 2)
    for j in range(0, 16, 8):
        lo, hi = _five_bits(simd8.bytes8(row, o + 6 + j), qh, j)
        put(out, k, j, simd8.scale(simd8.to_f32(simd8.isub(lo, 16)), d), x)
        put(out, k, j + 16, simd8.scale(simd8.to_f32(simd8.isub(hi, 16)), d), x)


@njit(inline="always")
def _q5_1(row, srow, b, out, k, f16, x, put):
    o = b * 24
    d = _half(row, o, f16)
    m = _half(row, o + 2, f16)
    qh = _qh32(row, o + 4)
    for j in range(0, 16, 8):
        lo, hi = _five_bits(simd8.bytes8(row, o + 8 + j), qh, j)
        put(out, k, j, simd8.affine(simd8.to_f32(lo), d, m), x)
        put(out, k, j + 16, simd8.affine(simd8.to_f32(hi), d, m), x)


@njit(inline="always")
def _q8_0(row, srow, b, out, k, f16, x, put):
    o = b * 34
    d = _half(row, o, f16)
    for j in range(0, 32, 8):
        put(out, k, j, simd8.scale(simd8.to_f32(simd8.bytes8(srow, o + 2 + j)), d), x)


@njit(inline="always")
def _mxfp4(row, srow, b, out, k, f16, x, put):
    o = b * 17
    scale = _E8M0_HALF[row[o]]
    for j in range(0, 16, 8):
        q = simd8.bytes8(row, o + 1 + j)
        put(out, k, j, simd8.scale(simd8.lookup(_E2M1_DOUBLED, simd8.band(q, 15)), scale), x)
        put(out, k, j + 16, simd8.scale(simd8.lookup(_E2M1_DOUBLED, simd8.shr(q, 4)), scale), x)


@njit(inline="always")
def _scale_min_k4(row, o, j):
    """get_scale_min_k4: the j-th 6-bit scale and min of a Q4_K / Q5_K block's 12 packed bytes at `o`."""
    if j < 4:
        return row[o + j] & 63, row[o + j + 4] & 63
    return ((row[o + j + 4] & 15) | ((row[o + j - 4] >> 6) << 4),
            (row[o + j + 4] >> 4) | ((row[o + j] >> 6) << 4))


@njit(inline="always")
def _q4_k(row, srow, b, out, k, f16, x, put):
    o = b * 144
    d = _half(row, o, f16)
    dmin = _half(row, o + 2, f16)
    for c in range(4):                                   # 64 elements per chunk: low nibbles, then high
        sc0, m0 = _scale_min_k4(row, o + 4, 2 * c)
        sc1, m1 = _scale_min_k4(row, o + 4, 2 * c + 1)
        d0, d1 = d * np.float32(sc0), d * np.float32(sc1)
        n0, n1 = dmin * np.float32(m0), dmin * np.float32(m1)
        for p in range(0, 32, 8):                        # (d0 * q + (-n0) is d0 * q - n0, bit for bit)
            q = simd8.bytes8(row, o + 16 + 32 * c + p)
            put(out, k, 64 * c + p, simd8.affine(simd8.to_f32(simd8.band(q, 15)), d0, -n0), x)
            put(out, k, 64 * c + 32 + p, simd8.affine(simd8.to_f32(simd8.shr(q, 4)), d1, -n1), x)


@njit(inline="always")
def _q5_k(row, srow, b, out, k, f16, x, put):
    o = b * 176
    d = _half(row, o, f16)
    dmin = _half(row, o + 2, f16)
    for c in range(4):
        sc0, m0 = _scale_min_k4(row, o + 4, 2 * c)
        sc1, m1 = _scale_min_k4(row, o + 4, 2 * c + 1)
        d0, d1 = d * np.float32(sc0), d * np.float32(sc1)
        n0, n1 = dmin * np.float32(m0), dmin * np.float32(m1)
        for p in range(0, 32, 8):
            q = simd8.bytes8(row, o + 48 + 32 * c + p)
            h = simd8.bytes8(row, o + 16 + p)
            lo = simd8.bor(simd8.band(q, 15), simd8.shl(simd8.band(simd8.shr(h, 2 * c), 1), 4))
            hi = simd8.bor(simd8.shr(q, 4), simd8.shl(simd8.band(simd8.shr(h, 2 * c + 1), 1), 4))
            put(out, k, 64 * c + p, simd8.affine(simd8.to_f32(lo), d0, -n0), x)
            put(out, k, 64 * c + 32 + p, simd8.affine(simd8.to_f32(hi), d1, -n1), x)


@njit(inline="always")
def _q6_k(row, srow, b, out, k, f16, x, put):
    # ql[128] | qh[64] | scales[16] int8 | d f16. Element 128h + 32c + p (half h, chunk c, p < 32): low 4 bits
    # from ql[64h + 32(c & 1) + p] (high nibble when c >= 2), high 2 bits (qh[32h + p] >> 2c) & 3, minus 32;
    # scale scales[8h + 2c + p // 16].
    o = b * 210
    d = _half(row, o + 208, f16)
    for h in range(2):
        for c in range(4):
            lo = o + 64 * h + 32 * (c & 1)
            shift = 4 * (c >> 1)
            for p in range(0, 32, 8):
                dl = d * np.float32(srow[o + 192 + 8 * h + 2 * c + p // 16])
                q = simd8.bor(simd8.band(simd8.shr(simd8.bytes8(row, lo + p), shift), 15),
                              simd8.shl(simd8.band(simd8.shr(simd8.bytes8(row, o + 128 + 32 * h + p), 2 * c), 3), 4))
                put(out, k, 128 * h + 32 * c + p, simd8.scale(simd8.to_f32(simd8.isub(q, 32)), dl), x)


F16_BLOCK = F16_RUN      # F16 matrices are decoded in runs of 64 values (cols must be a multiple)


@njit(inline="always")
def _f16_run(row, srow, b, out, k, f16, x, put):
    o = b * 2 * F16_BLOCK
    for j in range(0, F16_BLOCK, 8):
        put(out, k, j, simd8.halves8(row, o + 2 * j), x)


# ---- the two kernels, one body each, specialised per decoder below ---------------------------------------
# (Each specialisation is a module-level function, not a closure: numba's on-disk cache keys a function by
# its name and line, so closures made in a loop would share, and overwrite, one cache entry.)

@njit(inline="always")
def _matvec(raws, x, out, f16, decode, block, block_bytes):
    """raws: MATVEC_PARTS matrices [rows_p, nb * block_bytes] uint8 of one type (unused ones have no rows),
    x [nb * block] float32 -> out [sum of rows_p] float32, the parts' results side by side (q|k|v in one
    call: one parallel launch, and the small parts' rows share the threads with the big one's)."""
    nb = raws[0].shape[1] // block_bytes
    # the parallel tasks (ROWS_PER_TASK rows each) of all parts, numbered part after part
    first_task = np.zeros(MATVEC_PARTS + 1, np.int64)
    first_row = np.zeros(MATVEC_PARTS + 1, np.int64)
    for p in range(MATVEC_PARTS):
        rows = raws[p].shape[0]
        first_task[p + 1] = first_task[p] + (rows + ROWS_PER_TASK - 1) // ROWS_PER_TASK
        first_row[p + 1] = first_row[p] + rows
    for task in prange(first_task[MATVEC_PARTS]):
        p = 0
        while task >= first_task[p + 1]:
            p += 1
        raw = raws[p]
        sraw = raw.view(np.int8)
        r0 = (task - first_task[p]) * ROWS_PER_TASK
        lanes = simd8.scratch32()                    # per-position partial sums: no horizontal add per block
        for r in range(r0, min(raw.shape[0], r0 + ROWS_PER_TASK)):
            row, srow = raw[r], sraw[r]
            for at in range(0, 32, 8):
                simd8.store(lanes, at, simd8.zeros())
            for b in range(nb):
                decode(row, srow, b, lanes, b * block, f16, x, _accumulate)
            out[first_row[p] + r] = simd8.total(simd8.add(simd8.add(simd8.load(lanes, 0), simd8.load(lanes, 8)),
                                                          simd8.add(simd8.load(lanes, 16), simd8.load(lanes, 24))))


@njit(inline="always")
def _dequant(raw, out, f16, decode, block, block_bytes):
    """raw [rows, nb * block_bytes] uint8 -> out [rows, nb * block] float32 (bit-exact decode)."""
    nb = raw.shape[1] // block_bytes
    sraw = raw.view(np.int8)
    for r in range(raw.shape[0]):
        row, srow, dst = raw[r], sraw[r], out[r]
        for b in range(nb):
            decode(row, srow, b, dst, b * block, f16, f16, _store)


_MATVEC = dict(parallel=True, cache=CACHE, fastmath=True)
# the same product on the calling thread alone (prange runs as range): a small product skips the parallel
# launch and the thread-count switch around it (~20 us a call, per token hundreds of calls), and holds no GIL
_SERIAL_MATVEC = dict(cache=CACHE, fastmath=True, nogil=True)
# the decode is serial (a parallel loop costs ~3 s more compile time per type; prefill's float32 sgemm
# dominates it anyway) and releases the GIL
_DEQUANT = dict(cache=CACHE, nogil=True)


# (elements, bytes) per block, from the one table: numba freezes these module tuples into the compiled code
_Q4_0 = BLOCK_LAYOUT[GGMLType.Q4_0]
_Q4_1 = BLOCK_LAYOUT[GGMLType.Q4_1]
_Q5_0 = BLOCK_LAYOUT[GGMLType.Q5_0]
_Q5_1 = BLOCK_LAYOUT[GGMLType.Q5_1]
_Q8_0 = BLOCK_LAYOUT[GGMLType.Q8_0]
_MXFP4 = BLOCK_LAYOUT[GGMLType.MXFP4]
_Q4_K = BLOCK_LAYOUT[GGMLType.Q4_K]
_Q5_K = BLOCK_LAYOUT[GGMLType.Q5_K]
_Q6_K = BLOCK_LAYOUT[GGMLType.Q6_K]


@njit(**_MATVEC)
def matvec_q4_0(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q4_0, _Q4_0[0], _Q4_0[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q4_0(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q4_0, _Q4_0[0], _Q4_0[1])


@njit(**_DEQUANT)
def dequant_q4_0(raw, out, f16):
    _dequant(raw, out, f16, _q4_0, _Q4_0[0], _Q4_0[1])


@njit(**_MATVEC)
def matvec_q4_1(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q4_1, _Q4_1[0], _Q4_1[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q4_1(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q4_1, _Q4_1[0], _Q4_1[1])


@njit(**_DEQUANT)
def dequant_q4_1(raw, out, f16):
    _dequant(raw, out, f16, _q4_1, _Q4_1[0], _Q4_1[1])


@njit(**_MATVEC)
def matvec_q5_0(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q5_0, _Q5_0[0], _Q5_0[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q5_0(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q5_0, _Q5_0[0], _Q5_0[1])


@njit(**_DEQUANT)
def dequant_q5_0(raw, out, f16):
    _dequant(raw, out, f16, _q5_0, _Q5_0[0], _Q5_0[1])


@njit(**_MATVEC)
def matvec_q5_1(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q5_1, _Q5_1[0], _Q5_1[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q5_1(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q5_1, _Q5_1[0], _Q5_1[1])


@njit(**_DEQUANT)
def dequant_q5_1(raw, out, f16):
    _dequant(raw, out, f16, _q5_1, _Q5_1[0], _Q5_1[1])


@njit(**_MATVEC)
def matvec_q8_0(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q8_0, _Q8_0[0], _Q8_0[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q8_0(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q8_0, _Q8_0[0], _Q8_0[1])


@njit(**_DEQUANT)
def dequant_q8_0(raw, out, f16):
    _dequant(raw, out, f16, _q8_0, _Q8_0[0], _Q8_0[1])


@njit(**_MATVEC)
def matvec_mxfp4(raws, x, out, f16):
    _matvec(raws, x, out, f16, _mxfp4, _MXFP4[0], _MXFP4[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_mxfp4(raws, x, out, f16):
    _matvec(raws, x, out, f16, _mxfp4, _MXFP4[0], _MXFP4[1])


@njit(**_DEQUANT)
def dequant_mxfp4(raw, out, f16):
    _dequant(raw, out, f16, _mxfp4, _MXFP4[0], _MXFP4[1])


@njit(**_MATVEC)
def matvec_q4_k(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q4_k, _Q4_K[0], _Q4_K[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q4_k(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q4_k, _Q4_K[0], _Q4_K[1])


@njit(**_DEQUANT)
def dequant_q4_k(raw, out, f16):
    _dequant(raw, out, f16, _q4_k, _Q4_K[0], _Q4_K[1])


@njit(**_MATVEC)
def matvec_q5_k(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q5_k, _Q5_K[0], _Q5_K[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q5_k(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q5_k, _Q5_K[0], _Q5_K[1])


@njit(**_DEQUANT)
def dequant_q5_k(raw, out, f16):
    _dequant(raw, out, f16, _q5_k, _Q5_K[0], _Q5_K[1])


@njit(**_MATVEC)
def matvec_q6_k(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q6_k, _Q6_K[0], _Q6_K[1])

@njit(**_SERIAL_MATVEC)
def serial_matvec_q6_k(raws, x, out, f16):
    _matvec(raws, x, out, f16, _q6_k, _Q6_K[0], _Q6_K[1])


@njit(**_DEQUANT)
def dequant_q6_k(raw, out, f16):
    _dequant(raw, out, f16, _q6_k, _Q6_K[0], _Q6_K[1])


@njit(**_MATVEC)
def matvec_f16_run(raws, x, out, f16):
    _matvec(raws, x, out, f16, _f16_run, F16_BLOCK, 2 * F16_BLOCK)

@njit(**_SERIAL_MATVEC)
def serial_matvec_f16_run(raws, x, out, f16):
    _matvec(raws, x, out, f16, _f16_run, F16_BLOCK, 2 * F16_BLOCK)


@njit(**_DEQUANT)
def dequant_f16_run(raw, out, f16):
    _dequant(raw, out, f16, _f16_run, F16_BLOCK, 2 * F16_BLOCK)


def _layout(t: GGMLType) -> tuple[int, int]:
    return (F16_BLOCK, 2 * F16_BLOCK) if t == GGMLType.F16 else BLOCK_LAYOUT[t]


class Kernels(NamedTuple):
    block: int              # elements per kernel block
    block_bytes: int        # bytes per kernel block
    matvec: object          # parallel over the threads
    serial_matvec: object   # the same product on the calling thread
    dequant: object


KERNELS = {t: Kernels(*_layout(t), mv, smv, dq) for t, mv, smv, dq in [
    (GGMLType.Q4_0, matvec_q4_0, serial_matvec_q4_0, dequant_q4_0),
    (GGMLType.Q4_1, matvec_q4_1, serial_matvec_q4_1, dequant_q4_1),
    (GGMLType.Q5_0, matvec_q5_0, serial_matvec_q5_0, dequant_q5_0),
    (GGMLType.Q5_1, matvec_q5_1, serial_matvec_q5_1, dequant_q5_1),
    (GGMLType.Q8_0, matvec_q8_0, serial_matvec_q8_0, dequant_q8_0),
    (GGMLType.MXFP4, matvec_mxfp4, serial_matvec_mxfp4, dequant_mxfp4),
    (GGMLType.Q4_K, matvec_q4_k, serial_matvec_q4_k, dequant_q4_k),
    (GGMLType.Q5_K, matvec_q5_k, serial_matvec_q5_k, dequant_q5_k),
    (GGMLType.Q6_K, matvec_q6_k, serial_matvec_q6_k, dequant_q6_k),
    (GGMLType.F16, matvec_f16_run, serial_matvec_f16_run, dequant_f16_run),
]}


lean_cache_loads(globals())      # cached kernels are read without numba's implementation registry
