"""GPU tests. `gpu_tiny_names` lists the tiny golden models the GPU path runs (qwen35's Gated DeltaNet
layers and the mixture-of-experts FFNs of qwen3moe / gpt-oss have no GPU kernels yet: the engine runs those
models on the CPU)."""
from pathlib import Path

GPU_MISSING_ARCHS = ("qwen35", "qwen3moe", "gptoss")


def gpu_tiny_names(data: Path) -> list[str]:
    names = sorted(p.name.removesuffix(".golden.npz") for p in data.glob("tiny-*.golden.npz"))
    return [n for n in names if n.split("-")[1] not in GPU_MISSING_ARCHS]
