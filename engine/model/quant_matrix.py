"""Projection matrices kept in the file's quant type on the CPU, and the products over them.

A QuantMatrix is a read-only view of the model's memory map ([rows, bytes per row] uint8, no copy): a
98 MB Q4 file stays ~98 MB instead of ~700 MB of float32. Products (engine.model.quant_kernels, numba):
- few tokens (decode): a compiled matrix-vector product per token that decodes each block in registers
  and accumulates in float32 (activations are not quantized);
- many tokens (prefill): a chunk of rows is decoded to float32 (bit-exact with engine.gguf.dequantize)
  into a small scratch buffer and multiplied by BLAS sgemm, chunk after chunk.
A QuantLinear is a few matrices applied to the same input (q|k|v, gate|up) whose outputs sit side by side,
like the float32 path's fused matrices, without copying the parts.

Which path runs: `kernel_path()` is "numba" when numba imports and HALO_CPU_KERNELS is not "numpy";
otherwise the loader dequantizes everything to float32 as before (engine.model.weights), the reference
path. Diagnostics and the bench print it.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import threading
from dataclasses import dataclass
from functools import cache

import numpy as np

from engine.gguf.types import BLOCK_LAYOUT, GGMLType
from engine.model.host_pages import page_out

# numba's parallel loops may not be launched from two threads at once (its workqueue layer, the fallback
# where no OpenMP/TBB runtime exists, aborts the process); two models forwarding on the CPU at once (chat
# and a diagnostics run) take turns per product instead
_PARALLEL = threading.Lock()
DECODE_TOKENS = 4               # up to this many tokens, one matrix-vector product per token
# prefill decodes this many weights (1 MiB of float32) at a time: the scratch, and the BLAS packing of it, are
# part of the prefill's transient peak RSS (4 MiB chunks: +3-4 MiB), and 1 MiB stays in L2 (no slower)
CHUNK_ELEMENTS = 1 << 18
# A matrix-vector product runs on the calling thread alone unless splitting it pays for waking the kernel's
# other threads (they wait passively: quant_kernels sets OMP_WAIT_POLICY): n threads save (1 - 1/n) of its time
# and cost one wake-up, WAKE_WEIGHTS being the weights one thread decodes in that time. Measured on a 2-core Zen 3
# (2026-12-07, the vector kernels: ~11 G weights/s a thread for Q4_1, ~7 for Q5_0): SmolLM2's 1.77M-weight gate|up
# took 151 us on one thread and 118 us on two, its 0.44M-weight q|k 40 us against 55, so a wake-up cost ~35-45 us,
# ~0.45M weights; the wake-up depends on the machine and its load (10-120 us on earlier machines).
WAKE_WEIGHTS = 1 << 19


def serial_product(weights: int) -> bool:
    """Whether a product of `weights` weights runs on the calling thread alone (the threshold above)."""
    n = kernel_threads()
    return n < 2 or weights * (n - 1) < WAKE_WEIGHTS * n


# the types engine.model.quant_kernels serves; F16 is decoded in runs of F16_RUN values
KERNEL_TYPES = (GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1, GGMLType.Q8_0, GGMLType.MXFP4,
                GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.F16)
F16_RUN = 64


def _numpy_forced() -> bool:
    return os.environ.get("HALO_CPU_KERNELS", "").strip().lower() == "numpy"


@cache
def _load() -> tuple[object | None, str]:
    """(engine.model.quant_kernels or None, why not). Imports numba and runs the smoke test (seconds the
    first time ever): the weights loader calls it on the engine thread; memory estimates never do."""
    if _numpy_forced():
        return None, "HALO_CPU_KERNELS=numpy"
    try:
        from engine.model import quant_kernels
        _smoke_test(quant_kernels)
    except Exception as e:  # noqa: BLE001 - any failure (no numba, no LLVM, a frozen app's packaging) -> numpy
        return None, f"numba kernels unavailable: {type(e).__name__}: {e}"
    release_compiler_pages()
    return quant_kernels, ""


def _smoke_test(k) -> None:
    """Run one kernel pair on a tiny Q8_0 matrix (the specialisation real models use, so it is compiled or
    read from the cache once) and check it: a broken install falls back to numpy here, not mid-forward."""
    raw = np.zeros((2, 34), np.uint8)
    raw[:, 1] = 0x3C                          # scale 1.0 (float16 0x3C00)
    raw[:, 2:] = np.arange(32, dtype=np.uint8)
    raw.flags.writeable = False
    x = np.ones(32, np.float32)
    out, rows = np.empty(2, np.float32), np.empty((2, 32), np.float32)
    kernels = k.KERNELS[GGMLType.Q8_0]
    kernels.matvec((raw, k.NO_ROWS, k.NO_ROWS), x, out, k.F16_TABLE)
    kernels.dequant(raw, rows, k.F16_TABLE)
    if not (np.all(out == 496.0) and np.array_equal(rows[1], np.arange(32, dtype=np.float32))):
        raise RuntimeError(f"the Q8_0 kernels computed {out} on a known block")


def prepare_kernels(types) -> None:
    """Make the kernels of `types` (GGMLTypes; those without a kernel are skipped) and the decode attention
    ready now: compiled, or read from numba's disk cache, by one call each over zeros. The weights loader
    calls it with a model's types before it touches the weights, then gives LLVM's pages back
    (release_compiler_pages), so the compiler's memory and the model's are never resident together."""
    k = _kernels()
    if k is None:
        return
    for t in types:
        if t not in k.KERNELS:
            continue
        kernels = k.KERNELS[t]
        raw = np.zeros((1, kernels.block_bytes), np.uint8)
        raw.flags.writeable = False
        x = np.zeros(kernels.block, np.float32)
        with _PARALLEL:
            kernels.matvec((raw, k.NO_ROWS, k.NO_ROWS), x, np.empty(1, np.float32), k.F16_TABLE)
        kernels.serial_matvec((raw, k.NO_ROWS, k.NO_ROWS), x, np.empty(1, np.float32), k.F16_TABLE)
        kernels.dequant(raw, np.empty((1, len(x)), np.float32), k.F16_TABLE)
    _prepare_layer_kernels(layer_kernels())
    release_compiler_pages()


def _prepare_layer_kernels(lk) -> None:
    """engine.model.layer_kernels' specialisations a forward uses, over zeros: the array kinds as the forward
    passes them (weights read-only as the loader's, activations contiguous, q / k views of a wider row
    non-contiguous)."""
    weight = np.zeros(4, np.float32)
    weight.flags.writeable = False
    lk.rms_norm_rows(np.zeros((1, 4), np.float32), weight, 1e-6, lk.pairwise_plan(4), np.empty((1, 4), np.float32))
    table = np.zeros((2, 1, 2), np.float32)
    for x in (np.zeros((2, 1, 4), np.float32), np.zeros((2, 8), np.float32)[:, :4].reshape(2, 1, 4)):
        lk.rope_rows(x, table, table, 4, True, np.empty((2, 1, 4), np.float32))
    cache = np.zeros((1, 2, 1, 4), np.float32)
    lk.decode_attention(np.zeros((2, 4), np.float32), cache, cache, np.zeros(1, np.int32),
                        np.zeros(2, np.float32), lk.NO_SINKS, 1.0, np.empty(8, np.float32))


def layer_kernels():
    """engine.model.layer_kernels (RMSNorm, rotary embedding, a decode token's attention, compiled), or None
    on the numpy path."""
    if _kernels() is None:
        return None
    from engine.model import layer_kernels as lk
    return lk


def release_compiler_pages() -> int:
    """Hand LLVM's code pages back to the OS; returns the bytes of the mappings advised (0 where nothing
    was done). numba needs LLVM only to compile a kernel or load one from its cache; the products run
    compiled code alone. libllvmlite's ~70 MiB of touched pages are clean file-backed pages, so the OS can
    drop them at no cost and read them again from the file should a later kernel need them (Linux >= 5.4,
    MADV_PAGEOUT; elsewhere a no-op)."""
    if not sys.platform.startswith("linux"):
        return 0
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            maps = [line.split() for line in f]
    except OSError:
        return 0
    advised = 0
    for fields in maps:
        # only read-only or executable mappings of LLVM's library: their pages are never written
        if len(fields) < 6 or "llvmlite" not in fields[5] or "w" in fields[1]:
            continue
        start, end = (int(v, 16) for v in fields[0].split("-"))
        if page_out(start, end):
            advised += end - start
    return advised


def _kernels():
    return _load()[0]


def kernel_path() -> str:
    """"numba" (quantized weights, compiled products) or "numpy" (float32 weights, BLAS)."""
    return "numba" if _kernels() is not None else "numpy"


def kernel_threads() -> int | None:
    """The threads the compiled products run on (numba's count), None on the numpy path."""
    k = _kernels()
    return None if k is None else k.get_num_threads()


def describe_kernels() -> str:
    """One line for Diagnostics and the bench: which CPU path runs, and why."""
    k, why = _load()
    if k is None:
        return f"numpy float32 weights, BLAS ({why})"
    import numba
    return (f"numba {numba.__version__} quantized kernels, {kernel_threads()} threads "
            f"(types {', '.join(t.name for t in k.KERNELS)})")


@cache
def _numba_installed() -> bool:
    return importlib.util.find_spec("numba") is not None


_BLOCKS = {t: F16_RUN if t == GGMLType.F16 else BLOCK_LAYOUT[t][0] for t in KERNEL_TYPES}


def kernel_blocks() -> dict[GGMLType, int]:
    """Types a QuantMatrix can hold on this machine -> elements per kernel block (a row's length must be a
    multiple); empty on the numpy path. engine.model.arch.cpu_keeps_quantized decides with it. Cheap: it
    does not import numba (memory estimates run on the GUI thread), so before the kernels' first use it
    predicts from numba being installed; once a first use has failed it is empty, as the loader then is."""
    if _numpy_forced() or not _numba_installed() or (_load.cache_info().currsize and _kernels() is None):
        return {}
    return dict(_BLOCKS)


def kernel_block(ggml_type: GGMLType) -> int | None:
    """Elements per kernel block of `ggml_type`, or None when no kernel holds it here."""
    return kernel_blocks().get(ggml_type)


@dataclass(frozen=True, eq=False)
class QuantMatrix:
    """W [rows, cols] as the file stores it: `raw` [rows, bytes per row] uint8 (a read-only map view)."""
    raw: np.ndarray
    ggml_type: GGMLType
    rows: int
    cols: int

    def __post_init__(self):
        # always read-only (as the map is): numba compiles one specialisation per writeable flag
        if self.raw.flags.writeable:
            raw = self.raw.view()
            raw.flags.writeable = False
            object.__setattr__(self, "raw", raw)
        k = _kernels()                     # looked up once: decode calls these hundreds of times per token
        kernels = k.KERNELS[self.ggml_type]
        object.__setattr__(self, "_kernels", kernels)
        object.__setattr__(self, "_dequant", kernels.dequant)
        object.__setattr__(self, "_f16", k.F16_TABLE)
        object.__setattr__(self, "_alone", (self.raw,) + (k.NO_ROWS,) * (k.MATVEC_PARTS - 1))
        object.__setattr__(self, "_serial", serial_product(self.rows * self.cols))   # as QuantLinear's plan

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows, self.cols

    @property
    def nbytes(self) -> int:
        return self.raw.nbytes

    def dequantize(self, start: int = 0, stop: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
        """Rows start..stop as float32 [n, cols] (into `out` when given)."""
        stop = self.rows if stop is None else stop
        if out is None:
            out = np.empty((stop - start, self.cols), np.float32)
        self._dequant(self.raw[start:stop], out, self._f16)
        return out

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` as float32 [len(ids), cols] (an embedding lookup)."""
        out = np.empty((len(ids), self.cols), np.float32)
        rows = np.ascontiguousarray(self.raw[ids])
        rows.flags.writeable = False
        self._dequant(rows, out, self._f16)
        return out

    def matvec(self, x: np.ndarray, out: np.ndarray) -> None:
        """out [rows] = W @ x, x [cols] float32 contiguous."""
        _product(self._kernels, self._alone, x, out, self._f16, self._serial)

    def matmul_into(self, x: np.ndarray, out: np.ndarray) -> None:
        """out [T, rows] = x [T, cols] @ W.T (out may be a column slice of a wider array)."""
        if len(x) <= DECODE_TOKENS:
            row = np.empty(self.rows, np.float32)
            for t in range(len(x)):
                self.matvec(np.ascontiguousarray(x[t]), row)
                out[t] = row
            return
        step = max(1, CHUNK_ELEMENTS // self.cols)
        scratch = np.empty((min(step, self.rows), self.cols), np.float32)
        for r0 in range(0, self.rows, step):
            r1 = min(self.rows, r0 + step)
            w = self.dequantize(r0, r1, scratch[: r1 - r0])
            out[:, r0:r1] = x @ w.T


Matrix = np.ndarray | QuantMatrix


@dataclass(frozen=True, eq=False)
class QuantLinear:
    """Matrices [rows_i, cols] applied to one input, outputs concatenated: x @ concat(parts).T. A part is a
    QuantMatrix or a float32 array (an F32 tensor, or a type without a kernel). Per token, neighbouring
    parts of one quant type (q|k|v, gate|up) run as one kernel call (up to MATVEC_PARTS at a time)."""
    parts: tuple[Matrix, ...]

    def __post_init__(self):
        object.__setattr__(self, "_rows", sum(p.shape[0] for p in self.parts))
        object.__setattr__(self, "_token_plan", tuple(_token_plan(self.parts)))

    @property
    def shape(self) -> tuple[int, int]:
        return self._rows, self.parts[0].shape[1]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x [T, cols] float32 -> [T, rows]."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        out = np.empty((len(x), self._rows), np.float32)
        if len(x) <= DECODE_TOKENS:                  # per token: one matrix-vector call per run of parts
            for t in range(len(x)):
                xt, ot = x[t], out[t]
                for r0, r1, kernels, raws, f16, serial in self._token_plan:
                    if kernels is None:
                        ot[r0:r1] = raws @ xt                  # a float32 part (BLAS sgemv)
                    else:
                        _product(kernels, raws, xt, ot[r0:r1], f16, serial)
            return out
        r0 = 0
        for p in self.parts:
            r1 = r0 + p.shape[0]
            if isinstance(p, QuantMatrix):
                p.matmul_into(x, out[:, r0:r1])
            else:
                out[:, r0:r1] = x @ p.T
            r0 = r1
        return out

    def take(self, ids: np.ndarray) -> np.ndarray:
        """Rows `ids` of a one-part matrix as float32 (the token embedding)."""
        (p,) = self.parts
        return p.take(ids) if isinstance(p, QuantMatrix) else p[ids]


def _token_plan(parts: tuple[Matrix, ...]):
    """(first row, end row, kernels or None, raws or the float32 part, F16 table, serial) per kernel call of
    one token: neighbouring QuantMatrix parts of one type share a call, padded with NO_ROWS."""
    r0, i = 0, 0
    while i < len(parts):
        p = parts[i]
        if not isinstance(p, QuantMatrix):
            yield r0, r0 + p.shape[0], None, p, None, True
            r0, i = r0 + p.shape[0], i + 1
            continue
        run = [p]
        limit = len(p._alone)
        while (i + len(run) < len(parts) and len(run) < limit and isinstance(parts[i + len(run)], QuantMatrix)
               and parts[i + len(run)].ggml_type == p.ggml_type):
            run.append(parts[i + len(run)])
        rows = sum(q.rows for q in run)
        yield (r0, r0 + rows, p._kernels, tuple(q.raw for q in run) + p._alone[len(run):], p._f16,
               serial_product(rows * p.cols))
        r0, i = r0 + rows, i + len(run)


def _product(kernels, raws, x: np.ndarray, out: np.ndarray, f16: np.ndarray, serial: bool) -> None:
    """One matvec kernel call: the serial kernel on the calling thread when `serial` (a small product; it
    launches no parallel loop, so it needs no turn), else the parallel one."""
    if serial:
        kernels.serial_matvec(raws, x, out, f16)
        return
    with _PARALLEL:
        kernels.matvec(raws, x, out, f16)


def fuse(parts: list[Matrix]) -> np.ndarray | QuantLinear:
    """The float32 path's fused matrix (one concatenated array) when every part is float32, else a
    QuantLinear over the parts as they are."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
    return QuantLinear(tuple(parts))
