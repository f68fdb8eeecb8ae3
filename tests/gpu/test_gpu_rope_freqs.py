"""Llama 3.1/3.2 rope: `rope_freqs.weight` divides the rotary frequencies on the GPU exactly as on the CPU.

The tiny llama of tests/golden/data is rewritten with a non-trivial factor vector (each frequency divided by
1..8, as Llama 3.1's long-context rope does for its low frequencies); the GPU's prompt logits must equal the
CPU's, and must differ from the same file without the factors (so the check could fail).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.gpu.model import GpuModel
from engine.model.loader import load_model
from engine.model.step import KVCache, SequenceBlocks

pytestmark = pytest.mark.gpu
DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
PROMPT = [3, 17, 42, 99, 7, 5, 61, 12, 8, 33, 2, 90, 45, 11, 64, 28, 19, 71, 4, 56]


def with_rope_freqs(src: Path, dst: Path, factors: np.ndarray) -> Path:
    """A copy of the GGUF `src` (every tensor F32) with `rope_freqs.weight` = `factors` added."""
    import gguf

    reader = gguf.GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(dst, arch)
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), field.types[0], sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, np.asarray(t.data, np.float32).reshape([int(d) for d in reversed(t.shape)]))
    writer.add_tensor("rope_freqs.weight", factors.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dst


def cpu_logits(path: Path) -> np.ndarray:
    lm = load_model(path)
    kv = KVCache.allocate(lm.config, 4)
    return lm.model.forward(SequenceBlocks(kv).step(PROMPT), kv)[0]


def test_gpu_rotates_by_rope_freqs_like_the_cpu(backend, tmp_path):
    src = DATA / "tiny-llama-f32.gguf"
    half = load_model(src).config.rope_dim // 2
    factors = np.linspace(1.0, 8.0, half)
    path = with_rope_freqs(src, tmp_path / "llama31.gguf", factors)
    cpu = cpu_logits(path)
    assert not np.allclose(cpu, cpu_logits(src), atol=1e-3)      # the factors matter for this prompt
    gpu = GpuModel.load(path, backend, max_tokens=32, max_seqs=1, kv_blocks=4, use_graphs=False)
    kv = gpu.new_kv_cache(4)
    try:
        logits = gpu.forward(SequenceBlocks(kv).step(PROMPT), kv)[0]
    finally:
        kv.free()
        gpu.close()
    np.testing.assert_allclose(logits, cpu, atol=1e-3)
