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

    with qtbot.waitSignal(window.library.scanned, timeout=10_000):
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


def test_a_refused_chat_template_shows_a_notice_and_the_model_still_chats(qtbot, make_window, tmp_path):
    from pathlib import Path

    from engine.gguf.mutate import with_metadata

    tiny = Path(__file__).parents[1] / "golden" / "data" / "tiny-qwen2-f32.gguf"
    path = tmp_path / "refused-template.gguf"
    path.write_bytes(with_metadata(tiny.read_bytes(), {"tokenizer.chat_template": (V.STRING, "{% for %}")}))
    w = make_window(engine="own")
    with qtbot.waitSignal(w.client.loaded, timeout=60_000):
        w.models.load_path_now(str(path))
    assert w.banner.isVisible()
    assert "refused" in w.client.model.template_notice
