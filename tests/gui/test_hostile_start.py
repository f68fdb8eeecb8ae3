"""The app starts with hostile files in its models folder: each is listed as bad, none stops the start."""
from __future__ import annotations

import pytest

from app.__main__ import build_parser, start_model
from tests.unit.gguf_builder import GGUFBytes, V, minimal_model

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def _numeric_name_file() -> bytes:
    """The issue's 68-byte file: `general.name` is an array of numbers."""
    return GGUFBytes().kv("general.name", V.ARRAY, (V.UINT8, [1, 2, 3])).build()


def test_app_starts_and_lists_wrong_typed_files_as_bad(qtbot, make_window, tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "numeric-name.gguf").write_bytes(_numeric_name_file())
    (folder / "array-arch.gguf").write_bytes(
        minimal_model(general__architecture=(V.ARRAY, (V.INT32, [7]))).build())
    (folder / "array-template.gguf").write_bytes(
        minimal_model(tokenizer__chat_template=(V.ARRAY, (V.FLOAT32, [1.0]))).build())
    (folder / "good.gguf").write_bytes(minimal_model().build())
    monkeypatch.setenv("HALO_MODELS_DIR", str(folder))
    window = make_window(engine="own")

    start_model(window, build_parser().parse_args([]))     # what `python -m app` runs at start

    by_name = {e.path.name: e for e in window.library.entries}
    assert set(by_name) == {"numeric-name.gguf", "array-arch.gguf", "array-template.gguf", "good.gguf"}
    assert by_name["good.gguf"].ok
    for name in ("numeric-name.gguf", "array-arch.gguf", "array-template.gguf"):
        assert not by_name[name].ok
    assert "general.name" in by_name["numeric-name.gguf"].error
    assert "general.architecture" in by_name["array-arch.gguf"].error
    assert "tokenizer.chat_template" in by_name["array-template.gguf"].error
    assert window.isVisible()
