"""The self-test's GPU-versus-CPU logits comparison: first-step logits of a fixed short prompt on both.

The GPU forward pass lives in engine/gpu (built separately). This module calls it only through one
function, so the two stay decoupled:

    engine.gpu.first_step_logits(model_path, token_ids, backend=<backend name>, device=0) -> [vocab] float32

When engine.gpu or that function is missing, the check reports "GPU forward not available" (not run,
which does not fail the self-test). Tolerances are the quantized-arithmetic ones of
shared/reference/README.md (GPU kernels may quantize activations, as llama.cpp does): the GPU's top-1 id
within the CPU's top-3, and the logits of the CPU's top-10 ids within 1.0.
"""
from __future__ import annotations

import importlib
import time
from pathlib import Path

import numpy as np

from engine.model.arch import BLOCK_SIZE

from .diagnostics_report import LogitsCheck

TOLERANCE = 1.0
GPU_ENTRY = "first_step_logits"
# Token ids of the probe prompt, folded into the model's vocabulary; any ids work for a parity check.
PROMPT_IDS = (1, 504, 3128, 314, 260, 1167, 30, 2)


def gpu_forward():
    """engine.gpu's logits function, or (None, why not)."""
    try:
        module = importlib.import_module("engine.gpu")
    except ModuleNotFoundError as e:
        if e.name in ("engine.gpu", "engine"):
            return None, "GPU forward not available: engine.gpu is not part of this build"
        return None, f"GPU forward not available: engine.gpu needs {e.name}, which is not installed"
    except Exception as e:   # a broken GPU module is reported, not raised into the diagnostics
        return None, f"GPU forward not available: importing engine.gpu failed: {type(e).__name__}: {e}"
    fn = getattr(module, GPU_ENTRY, None)
    if fn is None:
        return None, f"GPU forward not available: engine.gpu has no {GPU_ENTRY}(model_path, token_ids, backend, device)"
    return fn, ""


def cpu_first_step_logits(model_path: str | Path, token_ids: list[int]) -> np.ndarray:
    from .model.loader import load_model
    from .model.step import SequenceBlocks

    loaded = load_model(Path(model_path))
    block_size = BLOCK_SIZE
    kv = loaded.model.new_kv_cache(-(-len(token_ids) // block_size), block_size)
    return loaded.model.forward(SequenceBlocks(kv).step(token_ids), kv)[0]


def compare_logits(backend: str, model_path: str | Path, device: int = 0) -> LogitsCheck:
    """Never raises: every failure is a LogitsCheck with the reason."""
    gpu, why = gpu_forward()
    if gpu is None:
        return LogitsCheck(None, why, str(model_path))
    check = LogitsCheck(False, "", str(model_path), tolerance=TOLERANCE)
    try:
        t0 = time.perf_counter()
        from .model.config import ModelConfig
        from .model.loader import open_model_file
        with open_model_file(Path(model_path)) as gguf:
            vocab = ModelConfig.from_metadata(gguf.metadata).vocab_size
        check.token_ids = [i % vocab for i in PROMPT_IDS]
        cpu = np.asarray(cpu_first_step_logits(model_path, check.token_ids), dtype=np.float32)
        check.cpu_seconds = round(time.perf_counter() - t0, 3)
        t0 = time.perf_counter()
        out = np.asarray(gpu(str(model_path), check.token_ids, backend=backend, device=device), dtype=np.float32)
        check.gpu_seconds = round(time.perf_counter() - t0, 3)
    except Exception as e:
        check.reason = f"the comparison could not run: {type(e).__name__}: {e}"
        return check
    return judge(check, cpu, out.reshape(-1))


def judge(check: LogitsCheck, cpu: np.ndarray, gpu: np.ndarray) -> LogitsCheck:
    """Fill `check` from the two logit vectors ([vocab] each)."""
    if cpu.shape != gpu.shape:
        check.passed, check.reason = False, f"shapes differ: cpu {cpu.shape}, gpu {gpu.shape}"
        return check
    if not np.isfinite(gpu).all():
        check.passed, check.reason = False, f"{int((~np.isfinite(gpu)).sum())} GPU logits are not finite"
        return check
    cpu_top = np.argsort(-cpu)[:10]
    gpu_top = np.argsort(-gpu)[:5]
    check.top1_cpu, check.top1_gpu = int(cpu_top[0]), int(gpu_top[0])
    check.top5_overlap = len(set(cpu_top[:5].tolist()) & set(gpu_top.tolist()))
    check.max_abs_diff = round(float(np.max(np.abs(cpu[cpu_top] - gpu[cpu_top]))), 5)
    top1_ok = check.top1_gpu in cpu_top[:3].tolist()
    check.passed = top1_ok and check.max_abs_diff <= TOLERANCE
    if check.passed:
        check.reason = "GPU and CPU agree on the first step's logits"
    elif not top1_ok:
        check.reason = f"the GPU's top-1 id {check.top1_gpu} is not in the CPU's top-3 {cpu_top[:3].tolist()}"
    else:
        check.reason = f"the CPU's top-10 logits differ by up to {check.max_abs_diff:.3g} (> {TOLERANCE})"
    return check
