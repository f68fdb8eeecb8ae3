"""The transformers-float32 reference cases of shared/reference/*.json, and the check every forward pass
(CPU: tests/golden/test_cpu_golden.py, GPU: tests/gpu/test_gpu_golden.py) must pass on them: the first
step's top-10 logits within 0.05, greedy ids equal up to the first step whose margin is below 0.1 (at
least 3). Only as many tokens as the comparison needs are generated."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine import model_store
from engine.model.step import SequenceBlocks

_MODEL_KEY_BY_FILE = {m.filename: m.key for m in model_store.KNOWN_MODELS.values()}


def reference_cases(reference_dir: Path) -> list:
    """pytest params (model key, one `generate` entry) for every prompt of every reference file."""
    cases = []
    for ref_path in sorted(Path(reference_dir).glob("*.json")):
        ref = json.loads(ref_path.read_text())
        key = _MODEL_KEY_BY_FILE[ref["model"]]
        for i, gen in enumerate(ref["generate"]):
            cases.append(pytest.param(key, gen, id=f"{key}-{i}"))
    return cases


def compared_steps(margins: list[dict]) -> int:
    """Steps whose greedy id must match: those before the first low-margin step, but at least 3."""
    low = [i for i, m in enumerate(margins) if m["margin"] < 0.1]
    return max(3, low[0] if low else len(margins))


def check_against_transformers(model, vocab_size: int, gen: dict) -> None:
    """`model`: anything with forward(StepInput, kv) -> logits [rows, vocab] and new_kv_cache(blocks, size)
    (engine.model's CPU forward, engine.gpu's GpuModel)."""
    n_steps = compared_steps(gen["hf_step_margins"])
    prompt = gen["prompt_ids"]
    kv = model.new_kv_cache(-(-(len(prompt) + n_steps) // 16), 16)
    try:
        seq = SequenceBlocks(kv)
        logits = model.forward(seq.step(prompt), kv)[0]
        assert logits.shape == (vocab_size,) and logits.dtype == np.float32
        ref_ids = [i for i, _ in gen["hf_first_top10"]]
        ref_logits = np.array([v for _, v in gen["hf_first_top10"]])
        np.testing.assert_allclose(logits[ref_ids], ref_logits, atol=0.05)
        generated = []
        for _ in range(n_steps):
            generated.append(int(np.argmax(logits)))
            if len(generated) < n_steps:
                logits = model.forward(seq.step([generated[-1]]), kv)[0]
        assert generated == gen["hf_greedy_ids"][:n_steps]
    finally:
        if hasattr(kv, "free"):
            kv.free()
