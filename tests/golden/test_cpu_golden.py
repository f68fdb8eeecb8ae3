"""The float32 CPU forward pass against transformers' float32 run of the same GGUF (shared/reference): for
every prompt of every reference file, the checks of tests/golden/reference_cases.py (first-step top-10
logits within 0.05, greedy ids up to the first low-margin step). The GPU runs the same cases in
tests/gpu/test_gpu_golden.py wherever the real models are present.
"""
from __future__ import annotations

import pytest

from engine.model.loader import load_model
from tests.conftest import REFERENCE_DIR, _model_path
from tests.golden.reference_cases import check_against_transformers, reference_cases

pytestmark = pytest.mark.golden

_loaded: dict[str, object] = {}


def _model(key: str):
    if key not in _loaded:
        _loaded.clear()                     # one model in memory at a time
        _loaded[key] = load_model(_model_path(key))
    return _loaded[key]


@pytest.mark.parametrize("key, gen", reference_cases(REFERENCE_DIR))
def test_first_logits_and_greedy_ids_match_transformers(key, gen):
    lm = _model(key)
    check_against_transformers(lm.model, lm.config.vocab_size, gen)
