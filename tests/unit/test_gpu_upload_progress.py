"""The GPU upload reports progress in bytes of the file (a MoE model's experts are a few huge tensors, so a
count of tensors would stall and jump), on the CPU backend with kernels recorded instead of run."""
from __future__ import annotations

from pathlib import Path

from engine.backends import registry
from engine.backends.base import Kernel
from engine.gpu.model import GpuModel

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"


def test_upload_progress_counts_bytes_up_to_the_whole_file():
    backend = registry.create("cpu")
    backend.kernel = lambda file, function: Kernel(function, None)
    backend.launch = lambda *a, **k: None
    seen: list[tuple[float, str]] = []
    m = GpuModel.load(DATA / "tiny-qwen3moe-q8_0.gguf", backend, max_tokens=16, max_seqs=2, kv_blocks=2,
                      progress=lambda f, msg: seen.append((f, msg)))
    try:
        fractions = [f for f, _ in seen]
        assert fractions == sorted(fractions) and 0 < fractions[0] and fractions[-1] > 0.99
        experts = [f for (f, _), (g, _) in zip(seen, seen[1:], strict=False) if g - f > 0.05]
        assert experts, "each stacked-experts tensor should move the bar by its share of the bytes"
        assert seen[-1][1].startswith("uploading weights: ") and seen[-1][1].endswith(" GiB")
    finally:
        m.close()
