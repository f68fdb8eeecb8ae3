"""GPU tests. `gpu_tiny_names` lists the tiny golden models the GPU path runs (gpt-oss's biased experts,
sinks and YaRN have no GPU kernels yet: the engine runs that model on the CPU)."""
from pathlib import Path

GPU_MISSING_ARCHS = ("gptoss",)


def gpu_tiny_names(data: Path) -> list[str]:
    names = sorted(p.name.removesuffix(".golden.npz") for p in data.glob("tiny-*.golden.npz"))
    return [n for n in names if n.split("-")[1] not in GPU_MISSING_ARCHS]
