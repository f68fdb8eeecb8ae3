"""The CPU path's memory pre-flight (engine.model.host_memory): a consistent file too large for this machine's
RAM is refused from its header with the numbers, before anything is dequantized, and the GPU pre-flight only
points to the CPU when the CPU could hold the model."""
from __future__ import annotations

from pathlib import Path

import pytest
from gguf_builder import V, minimal_model

from engine.engine import Engine
from engine.errors import OutOfDeviceMemoryError, OutOfHostMemoryError
from engine.gguf import GGMLType, open_gguf
from engine.gpu import preflight
from engine.model.arch import BLOCK_SIZE
from engine.model.config import ModelConfig
from engine.model.host_memory import available_host_memory, check_host_fits, plan_host_memory

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
ALIGN = 32


def write_sparse_llama(path: Path, n_embd: int, n_ff: int, n_layers: int = 2, matrix_type=GGMLType.F32) -> int:
    """A self-consistent llama whose tensors hold hundreds of GiB, written as a sparse file: the header is
    real, the data region is a hole the filesystem does not store (zeros: valid F32/F16 values). Matrices are
    `matrix_type` (F32 or F16), vectors F32. Returns the file's apparent size."""
    b = minimal_model(llama__block_count=(V.UINT32, n_layers), llama__embedding_length=(V.UINT32, n_embd),
                      llama__feed_forward_length=(V.UINT32, n_ff), llama__attention__head_count=(V.UINT32, 64),
                      llama__attention__head_count_kv=(V.UINT32, 8))
    b.tensors.clear()
    kv_dim = n_embd // 64 * 8
    shapes = {"token_embd.weight": [n_embd, 8], "output_norm.weight": [n_embd]}
    for i in range(n_layers):
        p = f"blk.{i}."
        shapes |= {p + "attn_norm.weight": [n_embd], p + "attn_q.weight": [n_embd, n_embd],
                   p + "attn_k.weight": [n_embd, kv_dim], p + "attn_v.weight": [n_embd, kv_dim],
                   p + "attn_output.weight": [n_embd, n_embd], p + "ffn_norm.weight": [n_embd],
                   p + "ffn_gate.weight": [n_embd, n_ff], p + "ffn_up.weight": [n_embd, n_ff],
                   p + "ffn_down.weight": [n_ff, n_embd]}
    offset = 0
    for name, ne in shapes.items():
        ggml_type = matrix_type if len(ne) == 2 else GGMLType.F32
        b.tensor(name, ne, ggml_type, offset=offset)
        n = 1
        for d in ne:
            n *= d
        offset = -(-(offset + (2 if ggml_type == GGMLType.F16 else 4) * n) // ALIGN) * ALIGN
    head = b.build(header_only=True)          # the real sizes live in the tensor infos; the data is a hole
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(len(head) + offset)
    return len(head) + offset


@pytest.fixture(scope="module")
def huge_llama(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("sparse") / "huge-llama.gguf"
    size = write_sparse_llama(path, n_embd=16384, n_ff=1 << 20)
    assert size > 200 << 30 and path.stat().st_blocks * 512 < 1 << 20      # hundreds of GiB, nothing stored
    return path


def test_the_cpu_path_refuses_a_model_larger_than_ram_from_its_header(huge_llama):
    """Before this pre-flight, the same file reached numpy's _ArrayMemoryError halfway through the load."""
    engine = Engine(backend="cpu")
    try:
        with pytest.raises(OutOfHostMemoryError) as e:
            engine.load(huge_llama).result(timeout=60)
    finally:
        engine.shutdown()
    msg = str(e.value)
    assert msg.startswith("huge-llama.gguf needs ") and "GiB of RAM on the CPU but only" in msg
    for part in ("weights", "KV cache", "scratch", "reserve", "smaller model"):
        assert part in msg


def test_the_host_plan_counts_the_weights_the_loader_holds_kv_and_scratch():
    from engine.model.loader import load_model

    with open_gguf(DATA / "tiny-llama-q4_1.gguf") as g:
        config = ModelConfig.from_metadata(g.metadata)
        tensors = list(g.tensors.values())
    small = plan_host_memory(config, tensors, 4, BLOCK_SIZE, 64, 1)
    assert small.weights == load_model(DATA / "tiny-llama-q4_1.gguf").weights.nbytes
    longer = plan_host_memory(config, tensors, 40, BLOCK_SIZE, 64, 1)
    assert longer.kv == 10 * small.kv and longer.scratch > small.scratch
    check_host_fits(small, "tiny", available=small.total)                  # exactly enough: fine
    with pytest.raises(OutOfHostMemoryError, match=r"tiny needs .* GiB of RAM"):
        check_host_fits(small, "tiny", available=small.total - 1)
    assert available_host_memory() > 0                                     # this OS can say


def test_the_gpu_refusal_suggests_the_cpu_only_when_the_cpu_can_hold_it(huge_llama):
    def refusal(path: Path, cpu_available: int | None):
        with open_gguf(path) as g:
            config, tensors = ModelConfig.from_metadata(g.metadata), list(g.tensors.values())
        plan = preflight.plan_memory(config, tensors, 8, BLOCK_SIZE, 64, 1)
        host = plan_host_memory(config, tensors, 8, BLOCK_SIZE, 64, 1)
        with pytest.raises(OutOfDeviceMemoryError) as e:
            preflight.check_fits(plan, plan.total - 1, plan.total, what=path.name, host_plan=host)
        return e.value

    huge = refusal(huge_llama, None)
    assert huge.cpu_fits is False and "the CPU cannot hold it either" in str(huge)
    assert "or the CPU" not in str(huge)
    tiny = refusal(DATA / "tiny-llama-q4_1.gguf", None)
    assert tiny.cpu_fits is True and str(tiny).endswith("use a smaller context or quantization, or the CPU")


def test_the_gpu_load_weighs_the_devices_own_free_memory(huge_llama):
    """GpuModel.load asks the backend how much memory is free right now (here the CPU backend: this machine's
    RAM) and refuses before uploading anything, naming the free and total figures it was told."""
    import re

    from engine.backends import registry
    from engine.gpu.model import GpuModel

    backend = registry.create("cpu")
    mem = backend.memory_info()
    with pytest.raises(OutOfDeviceMemoryError) as e:
        GpuModel.load(huge_llama, backend, max_tokens=16, max_seqs=1, kv_blocks=1)
    free, total = (float(x) for x in re.search(r"only ([\d.]+) MiB of ([\d.]+) MiB are free", str(e.value)).groups())
    assert total == round(mem.total / 2**20, 1)
    assert abs(free - mem.free / 2**20) < 0.1 * mem.total / 2**20          # the free memory of the moment
    assert e.value.plan.total > mem.total
