"""The model name people see (ModelInfo.name): general.name, unless the converter mangled a finetune label
into it; then the file's own name without its quantization suffix."""
from __future__ import annotations

import pytest

from engine.model.loader import model_info, open_model_file

pytestmark = pytest.mark.golden


def test_real_models_get_readable_names(smollm2_path, gemma_path):
    with open_model_file(smollm2_path) as g:
        assert g.metadata["general.name"] == "Smollm2 135M 8k Lc100K Mix1 Ep2"      # what the file says
        assert model_info(smollm2_path, g).name == "SmolLM2-135M-Instruct"
    with open_model_file(gemma_path) as g:
        assert model_info(gemma_path, g).name == "Gemma 3 270m"                     # a good general.name stays


def test_library_shows_the_same_name_as_the_engine(smollm2_path):
    from app.library import inspect_model
    assert inspect_model(smollm2_path).display_name == "SmolLM2-135M-Instruct"
