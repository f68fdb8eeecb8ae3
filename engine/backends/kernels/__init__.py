"""HIP/CUDA C++ kernel sources (*.cu, one dialect via prelude.h) and their CPU (numpy) twins.

`source(file)` is what gets compiled: the prelude followed by the file. `CPU_KERNELS` maps each kernel
name to a numpy function with the same arguments, which is how the CPU backend "compiles" a kernel.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

KERNEL_DIR = Path(__file__).resolve().parent


def source(file: str) -> str:
    prelude = (KERNEL_DIR / "prelude.h").read_text()
    return prelude + "\n#line 1 \"" + file + "\"\n" + (KERNEL_DIR / file).read_text()


def expected_ids(n: int, seed: int) -> np.ndarray:
    """What halo_write_ids writes, computed on the host: the self-test's oracle."""
    i = np.arange(n, dtype=np.int64)
    return ((seed * 7919 + i * 104729) % 151936).astype(np.int32)


def _write_ids(grid, block, out: np.ndarray, n, seed) -> None:
    out.view(np.int32)[: int(n)] = expected_ids(int(n), int(seed))


def _add_f32(grid, block, out: np.ndarray, a: np.ndarray, b: np.ndarray, n) -> None:
    n = int(n)
    out.view(np.float32)[:n] = a.view(np.float32)[:n] + b.view(np.float32)[:n]


CPU_KERNELS = {"halo_write_ids": _write_ids, "halo_add_f32": _add_f32}


def kernel_files() -> list[str]:
    """Every kernel source file (the kernel sets): what the runtime may compile and the build compiles."""
    return sorted(p.name for p in KERNEL_DIR.glob("*.cu"))
