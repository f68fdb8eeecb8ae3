"""Shared fixtures. Tests are grouped by what they need: unit/ (nothing), golden/ (real models),
gui/ (Qt offscreen), backend/ (every backend the probe finds), gpu/ (a real GPU), frozen/ (the bundle)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REFERENCE_DIR = SHARED / "reference"


def _model_path(key: str) -> Path:
    from engine import model_store

    model = model_store.KNOWN_MODELS[key]
    path = model_store.find_local(model)
    if path is None:
        msg = f"{model.filename} not found in {model_store.models_dir()}; run: python -m engine fetch --all"
        if os.environ.get("CI"):
            pytest.fail(msg)   # CI fetches the models first: a missing file there is a real failure
        pytest.skip(msg)
    return path


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return _model_path("smollm2-135m")


@pytest.fixture(scope="session")
def gemma_path() -> Path:
    return _model_path("gemma3-270m")


@pytest.fixture(scope="session")
def smollm2_reference() -> dict:
    return json.loads((REFERENCE_DIR / "smollm2-135m-instruct-q4_1.json").read_text())


@pytest.fixture(scope="session")
def gemma_reference() -> dict:
    return json.loads((REFERENCE_DIR / "gemma-3-270m-q4_k_m.json").read_text())
