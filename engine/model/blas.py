"""Control of the BLAS thread count numpy uses, without extra dependencies.

Why: a decode step is a chain of small matrix-vector products that one core already streams at memory
speed; OpenBLAS's extra threads then only add synchronization, and when the cores are shared with
other work they spin and make it 10-30x slower (measured: 0.3 ms -> 8.7 ms for a [1,576]x[576,3072]
product on a loaded 2-core machine). Prefill (many tokens) is compute-bound and gains from threads.

numpy's wheels bundle OpenBLAS under a prefixed symbol name; we find it in numpy's own library folder.
If it cannot be found (another BLAS, an unusual build) every call here is a no-op.
"""
from __future__ import annotations

import ctypes
import glob
import os
from functools import cache

import numpy as np

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


@cache
def _library():
    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        getter = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        if setter is not None and getter is not None:
            setter.argtypes = [ctypes.c_int]
            getter.restype = ctypes.c_int
            return setter, getter
    return None


def blas_threads() -> int | None:
    """Current BLAS thread count, or None when the BLAS is not controllable."""
    lib = _library()
    return int(lib[1]()) if lib else None


def set_blas_threads(n: int) -> None:
    lib = _library()
    if lib is not None and n >= 1:
        lib[0](int(n))


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:          # Windows, macOS
        return os.cpu_count() or 1


def default_threads() -> int:
    """BLAS threads for compute-bound steps: HALO_CPU_THREADS if set (0 or "all": every core), else 1."""
    value = os.environ.get("HALO_CPU_THREADS", "1").strip().lower()
    if value in ("0", "all"):
        return available_cores()
    try:
        return max(1, int(value))
    except ValueError:
        return 1
