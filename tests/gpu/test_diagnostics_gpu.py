"""The diagnostics' GPU-versus-CPU logits check (engine.diagnostics_logits) on a real GPU: it must find
engine.gpu.first_step_logits and pass on every tiny architecture; the same files the forward tests use."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.diagnostics_logits import compare_logits

pytestmark = pytest.mark.gpu
DATA = Path(__file__).resolve().parents[2] / "tests" / "golden" / "data"


@pytest.mark.parametrize("name", ["tiny-llama-q4_1", "tiny-gemma3-q4_k_m", "tiny-qwen2-q8_0", "tiny-qwen3-q4_k_m"])
def test_logits_check_passes_on_the_gpu(name, gpu_name):
    check = compare_logits(gpu_name, DATA / f"{name}.gguf")
    assert check.passed is True, check.reason
    assert check.gpu_seconds is not None and check.gpu_seconds > 0
