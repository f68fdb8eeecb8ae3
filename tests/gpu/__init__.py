"""GPU tests. `gpu_tiny_names` lists the tiny golden models the GPU path runs: every architecture has GPU
kernels now (GPU_MISSING_ARCHS names any that would not)."""
from pathlib import Path

GPU_MISSING_ARCHS: tuple[str, ...] = ()


def gpu_tiny_names(data: Path) -> list[str]:
    names = sorted(p.name.removesuffix(".golden.npz") for p in data.glob("tiny-*.golden.npz"))
    return [n for n in names if n.split("-")[1] not in GPU_MISSING_ARCHS]
