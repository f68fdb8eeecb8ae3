"""Advice to the OS about this process's pages (Linux madvise; elsewhere every call does nothing).

Two uses on the CPU path:
- `prefer_small_pages(array)`: the KV cache is allocated for a whole context but written a few slots at a
  time. numpy asks for transparent huge pages on large arrays, so the first slot written in each 2 MiB of
  every layer's K and V made 2 MiB resident: 120 MiB for SmolLM2 after one short chat (60 arrays x 2 MiB)
  instead of the ~9 MiB written. With 4 KiB pages the cache costs what has been written.
- `page_out(start, end)`: hand clean pages back (engine.model.quant_matrix.release_compiler_pages).
"""
from __future__ import annotations

import ctypes
import sys
from functools import cache

import numpy as np

MADV_NOHUGEPAGE = 15         # linux/mman.h
MADV_PAGEOUT = 21            # Linux >= 5.4; older kernels answer EINVAL and keep the pages
PAGE = 4096


@cache
def _madvise():
    if not sys.platform.startswith("linux"):
        return None
    try:
        f = ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None
    f.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return f


def advise(start: int, end: int, advice: int) -> bool:
    """madvise over the whole pages inside [start, end); False where it failed or the OS has none."""
    f = _madvise()
    start = -(-start // PAGE) * PAGE
    end = end // PAGE * PAGE
    if f is None or end <= start:
        return False
    return f(start, end - start, advice) == 0


def prefer_small_pages(array: np.ndarray) -> np.ndarray:
    """`array` (a fresh, not yet written allocation) backed by 4 KiB pages: memory follows what is written."""
    advise(array.ctypes.data, array.ctypes.data + array.nbytes, MADV_NOHUGEPAGE)
    return array


def page_out(start: int, end: int) -> bool:
    return advise(start, end, MADV_PAGEOUT)
