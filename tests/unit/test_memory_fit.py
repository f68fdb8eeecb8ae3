"""The memory pre-flight's verdict on a table of machines for the two MoE models owners run on Strix Halo,
from the engine's own formulas over the models' real tensor tables (tests/unit/published_shapes.py), at a
32k context: where each fits, and the words shown."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from published_shapes import GPTOSS_20B, QWEN3MOE_30B, gptoss_20b_tensors, qwen3moe_30b_tensors  # noqa: E402

from engine.gpu.preflight import plan_memory  # noqa: E402
from engine.model import arch  # noqa: E402
from engine.model.config import ModelConfig  # noqa: E402
from engine.model.host_memory import plan_host_memory  # noqa: E402
from engine.model.memory_fit import MemoryFacts, fit_verdict  # noqa: E402

G = 1 << 30
CONTEXT = 32768
HALO = "Radeon 8060S"


def _gib(x: float) -> int:
    return int(x * G)


MACHINES = {   # what the OS and a GPU runtime that counts dedicated + shared report on each
    "strix-128-96ded-linux": MemoryFacts(_gib(31), _gib(27), HALO, _gib(96 + 15.5), _gib(110), True, _gib(96)),
    "strix-128-64ded-linux": MemoryFacts(_gib(63), _gib(58), HALO, _gib(64 + 31.5), _gib(94), True, _gib(64)),
    "strix-128-32ded-win": MemoryFacts(_gib(95), _gib(88), HALO, _gib(32 + 47.5), _gib(78), True, _gib(32),
                                       platform="win32"),
    # firmware default 512 MB and a runtime that counts only the dedicated part: the model needs the shared part
    "strix-128-05ded-linux-vram-only": MemoryFacts(_gib(127), _gib(115), HALO, _gib(0.5), _gib(0.4), True,
                                                   _gib(0.5)),
    "strix-128-96ded-no-gpu-runtime": MemoryFacts(_gib(31), _gib(27), "", 0, 0, True, _gib(96), platform="win32"),
    "strix-128-112ded-no-gpu-runtime": MemoryFacts(_gib(15), _gib(12), "", 0, 0, True, _gib(112), platform="win32"),
    "discrete-24gb-ram-64": MemoryFacts(_gib(62.8), _gib(55), "RTX 4090", _gib(23.6), _gib(23.4)),
    "h200": MemoryFacts(_gib(125), _gib(120), "NVIDIA H200", _gib(139.8), _gib(139)),
}
MODELS = {"30b": (QWEN3MOE_30B, qwen3moe_30b_tensors), "20b": (GPTOSS_20B, gptoss_20b_tensors)}

# machine, model -> where it runs, and phrases its words must hold
TABLE = [
    ("strix-128-96ded-linux", "30b", "gpu", ["Fits on Radeon 8060S", "96.0 GiB of RAM is dedicated", "GTT size"]),
    ("strix-128-96ded-linux", "20b", "gpu", ["Fits on Radeon 8060S", "CPU never sees that part"]),
    ("strix-128-64ded-linux", "30b", "gpu", ["64.0 GiB of RAM is dedicated", "31.5 GiB more of shared"]),
    ("strix-128-64ded-linux", "20b", "gpu", ["Fits on Radeon 8060S"]),
    ("strix-128-32ded-win", "30b", "gpu", ["32.0 GiB of RAM is dedicated", "Windows lets it borrow at most half"]),
    ("strix-128-32ded-win", "20b", "gpu", ["Fits on Radeon 8060S"]),
    ("strix-128-05ded-linux-vram-only", "30b", "cpu",
     ["Does not fit on Radeon 8060S: needs 24.3 GiB", "0.5 GiB of RAM is dedicated", "counts none of the shared system memory",
      "Raise the dedicated memory in the firmware setup (UMA frame buffer / iGPU memory) or the GTT limit",
      "115.0 GiB are available: it runs on the CPU instead"]),
    # the CPU path holds quantized weights at their file size (engine.model.quant_matrix)
    ("strix-128-96ded-no-gpu-runtime", "30b", "cpu", ["CPU path needs 26.1 GiB", "27.0 GiB are available",
                                                       "runs on the CPU instead"]),
    ("strix-128-96ded-no-gpu-runtime", "20b", "cpu", ["CPU path needs 19.3 GiB", "runs on the CPU instead"]),
    ("strix-128-112ded-no-gpu-runtime", "30b", None,
     ["CPU path needs 26.1 GiB", "12.0 GiB are available", "does not fit",
      "112.0 GiB dedicated to the integrated GPU is invisible to the CPU"]),
    ("discrete-24gb-ram-64", "30b", "cpu", ["Does not fit on RTX 4090: needs 24.3 GiB", "23.4 GiB free of 23.6 GiB",
                                             "runs on the CPU instead"]),
    ("discrete-24gb-ram-64", "20b", "gpu", ["Fits on RTX 4090: needs 15.1 GiB"]),
    ("h200", "30b", "gpu", ["Fits on NVIDIA H200"]),
    ("h200", "20b", "gpu", ["Fits on NVIDIA H200"]),
]


def _needs(model: str) -> tuple[int, int]:
    meta, tensors = MODELS[model]
    c, t = ModelConfig.from_metadata(meta), tensors()
    blocks = -(-CONTEXT // arch.BLOCK_SIZE)
    return (plan_memory(c, t, blocks, arch.BLOCK_SIZE, 512, 16).total,
            plan_host_memory(c, t, blocks, arch.BLOCK_SIZE, 512, 16).total)


def test_the_stand_ins_are_the_published_sizes():
    assert sum(t.nbytes for t in qwen3moe_30b_tensors()) / G == pytest.approx(17.28, abs=0.01)
    assert sum(t.nbytes for t in gptoss_20b_tensors()) / 1e9 == pytest.approx(12.1, abs=0.05)


def test_the_cpu_plans_experts_at_file_size_not_as_float32():
    """113.7 GiB as float32 would refuse the 30B on every machine here; the CPU keeps experts quantized."""
    tensors = qwen3moe_30b_tensors()
    assert sum(t.n_elements * 4 for t in tensors) / G > 110
    assert arch.weight_bytes(tensors, "cpu") / G < 23


@pytest.mark.parametrize("machine,model,where,phrases", TABLE, ids=[f"{m}-{n}" for m, n, _, _ in TABLE])
def test_where_each_model_fits_and_what_the_owner_reads(machine, model, where, phrases):
    gpu_need, cpu_need = _needs(model)
    verdict = fit_verdict(MACHINES[machine], gpu_need, cpu_need)
    print(f"{machine} / {model}: {verdict.where}\n  {verdict.words}")
    assert verdict.where == where
    for phrase in phrases:
        assert phrase in verdict.words, (phrase, verdict.words)


def test_an_integrated_gpu_refusal_explains_dedicated_and_shared_memory():
    from engine.errors import OutOfDeviceMemoryError
    from engine.gpu.preflight import MemoryPlan, check_fits

    plan = MemoryPlan(20 * G, G, G, G)
    with pytest.raises(OutOfDeviceMemoryError) as e:
        check_fits(plan, 8 * G, 16 * G, what="qwen3-30b.gguf", integrated=True, dedicated=_gib(0.5))
    text = str(e.value)
    assert "needs 23552.0 MiB of device memory but only 8192.0 MiB" in text
    assert "0.5 GiB of RAM is dedicated to it in the firmware" in text and "15.5 GiB more of shared" in text
    assert "or the GTT limit" in text or "Windows" in text
    with pytest.raises(OutOfDeviceMemoryError) as e:                  # a discrete GPU: no such words
        check_fits(plan, 8 * G, 16 * G, what="qwen3-30b.gguf")
    assert "firmware" not in str(e.value)


def test_the_dedicated_part_is_read_from_amdgpu_sysfs(tmp_path):
    from engine.model.memory_fit import amd_dedicated_bytes

    assert amd_dedicated_bytes(str(tmp_path)) is None
    dgpu, apu = tmp_path / "card0" / "device", tmp_path / "card1" / "device"
    for d, vram, gtt in ((dgpu, 24 * G, 16 * G), (apu, 512 << 20, 64 * G)):   # a discrete card, then the APU
        d.mkdir(parents=True)
        (d / "mem_info_vram_total").write_text(f"{vram}\n")
        (d / "mem_info_gtt_total").write_text(f"{gtt}\n")
    assert amd_dedicated_bytes(str(tmp_path)) == 512 << 20


@pytest.mark.parametrize("machine,model,where,phrases", [
    ("strix-128-96ded-linux", "30b", "gpu", ["Fits on Radeon 8060S", "96.0 GiB of RAM is dedicated", "GTT size"]),
    ("strix-128-05ded-linux-vram-only", "30b", "cpu",
     ["0.5 GiB of RAM is dedicated", "Raise the dedicated memory in the firmware setup", "runs on the CPU instead"]),
    ("strix-128-112ded-no-gpu-runtime", "30b", "too_large", ["112.0 GiB dedicated to the integrated GPU is invisible"]),
    ("discrete-24gb-ram-64", "30b", "cpu", ["Does not fit on RTX 4090", "runs on the CPU instead"]),
])
def test_the_app_shows_these_words_before_a_download(machine, model, where, phrases):
    """The Discover page's verdict (engine.hub.fit_verdict, from a remote file's header) speaks the same
    words, from the same machine facts: one verdict, not a second wording."""
    from engine.gguf.file import GGUFHeader
    from engine.hub import Machine, fit_verdict

    f = MACHINES[machine]
    meta, tensors = MODELS[model]
    infos = tensors()
    header = GGUFHeader(3, 32, 0, sum(t.nbytes for t in infos), meta, {t.name: t for t in infos})
    shown = Machine(ram_free=f.host_available, gpu_free=f.gpu_free if f.gpu_name else None, gpu_name=f.gpu_name,
                    gpu_total=f.gpu_total, integrated=f.integrated, dedicated=f.dedicated, ram_total=f.host_total,
                    platform=f.platform)
    verdict = fit_verdict(header, shown, CONTEXT)
    assert verdict.fit == where, verdict.words
    for phrase in phrases:
        assert phrase in verdict.words, (phrase, verdict.words)
