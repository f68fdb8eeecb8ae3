"""The float32 CPU forward pass against transformers' float32 run of the same GGUF (shared/reference).

For every prompt of every reference file: the first step's top-10 logits within 0.05 of `hf_first_top10`,
and greedy ids equal to `hf_greedy_ids` up to the first step whose margin is below 0.1 (at least 3).
Only as many tokens as the comparison needs are generated, to keep CI time small.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from engine import model_store
from engine.model.loader import load_model
from engine.model.step import SequenceBlocks
from tests.conftest import REFERENCE_DIR, _model_path

pytestmark = pytest.mark.golden

_MODEL_KEY_BY_FILE = {m.filename: m.key for m in model_store.KNOWN_MODELS.values()}


def _cases() -> list:
    cases = []
    for ref_path in sorted(REFERENCE_DIR.glob("*.json")):
        ref = json.loads(ref_path.read_text())
        key = _MODEL_KEY_BY_FILE[ref["model"]]
        for i, gen in enumerate(ref["generate"]):
            cases.append(pytest.param(key, gen, id=f"{key}-{i}"))
    return cases


_loaded: dict[str, object] = {}


def _model(key: str):
    if key not in _loaded:
        _loaded.clear()                     # one model in memory at a time
        _loaded[key] = load_model(_model_path(key))
    return _loaded[key]


def compared_steps(margins: list[dict]) -> int:
    """Steps whose greedy id must match: those before the first low-margin step, but at least 3."""
    low = [i for i, m in enumerate(margins) if m["margin"] < 0.1]
    return max(3, low[0] if low else len(margins))


@pytest.mark.parametrize("key, gen", _cases())
def test_first_logits_and_greedy_ids_match_transformers(key, gen):
    lm = _model(key)
    n_steps = compared_steps(gen["hf_step_margins"])
    prompt = gen["prompt_ids"]
    kv = lm.model.new_kv_cache(num_blocks=-(-(len(prompt) + n_steps) // 16), block_size=16)
    seq = SequenceBlocks(kv)

    logits = lm.model.forward(seq.step(prompt), kv)[0]
    assert logits.shape == (lm.config.vocab_size,) and logits.dtype == np.float32
    ref_ids = [i for i, _ in gen["hf_first_top10"]]
    ref_logits = np.array([v for _, v in gen["hf_first_top10"]])
    np.testing.assert_allclose(logits[ref_ids], ref_logits, atol=0.05)

    generated = []
    for _ in range(n_steps):
        generated.append(int(np.argmax(logits)))
        if len(generated) < n_steps:
            logits = lm.model.forward(seq.step([generated[-1]]), kv)[0]
    assert generated == gen["hf_greedy_ids"][:n_steps]
