"""The CPU path's golden cases (tests/golden/reference_cases.py: transformers float32 on the real GGUFs)
on the GPU forward, wherever the real models are present (they are too large to travel to the H200 in one
call: tests/gpu/device_call.sh takes SmolLM2 when it was carried there in chunks, HALO_MODELS_DIR).
HALO_REFERENCE_DIR points at shared/reference when ../shared is not beside the checkout."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import model_store
from engine.gpu.model import GpuModel
from tests.conftest import REFERENCE_DIR
from tests.golden.reference_cases import check_against_transformers, reference_cases

pytestmark = pytest.mark.gpu
REFERENCES = Path(os.environ.get("HALO_REFERENCE_DIR", REFERENCE_DIR))


_loaded: dict = {}


def _model(key: str, backend):
    path = model_store.find_local(model_store.KNOWN_MODELS[key])
    if path is None:
        pytest.skip(f"{model_store.KNOWN_MODELS[key].filename} not in {model_store.models_dir()}")
    if (key, id(backend)) not in _loaded:
        for m in _loaded.values():
            m.close()
        _loaded.clear()
        _loaded[(key, id(backend))] = GpuModel.load(path, backend, max_tokens=256, max_seqs=1, kv_blocks=32)
    return _loaded[(key, id(backend))]


@pytest.mark.parametrize("key, gen", reference_cases(REFERENCES))
def test_gpu_first_logits_and_greedy_ids_match_transformers(key, gen, backend):
    m = _model(key, backend)
    check_against_transformers(m, m.config.vocab_size, gen)
