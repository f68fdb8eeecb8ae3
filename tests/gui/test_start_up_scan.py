"""Start-up reads the library off the GUI thread (a folder of big models takes seconds to read) and still makes
the same choices once the list arrives: the model used last time loads, a first run is offered the starter
model, and a model the user opened meanwhile is not replaced."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.__main__ import build_parser, start_model

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
NO_ARGUMENTS = build_parser().parse_args([])


@pytest.fixture
def models(two_tiny_models, settings) -> Path:
    settings.backend = "cpu"
    return two_tiny_models


def test_the_model_used_last_time_loads_with_no_file_read_on_the_gui_thread(qtbot, make_window, settings, models,
                                                                             opens_of):
    settings.last_model = str(models / "alpha.gguf")
    w = make_window(engine="own")
    opened_by = opens_of(models / "alpha.gguf", models / "beta.gguf")
    with qtbot.waitSignal(w.client.loaded, timeout=60_000) as loaded:
        start_model(w, NO_ARGUMENTS)
    assert loaded.args[0].path == str(models / "alpha.gguf")
    assert opened_by, "the scan and the engine opened the files"
    assert threading.main_thread() not in opened_by


def test_a_model_opened_before_the_scan_ends_is_not_replaced_by_the_last_one(qtbot, make_window, settings, models):
    settings.last_model = str(models / "alpha.gguf")
    w = make_window(engine="own")
    with qtbot.waitSignals([w.library.scanned, w.client.loaded], timeout=60_000):
        start_model(w, NO_ARGUMENTS)
        w.models.load_path_now(str(models / "beta.gguf"))     # the same turn: before the scan can arrive
    assert not w.client.is_loading
    assert w.client.model.path == str(models / "beta.gguf")


def test_a_first_run_is_offered_the_starter_model_after_the_scan(qtbot, make_window, tmp_path, monkeypatch):
    empty = tmp_path / "no-models"
    empty.mkdir()
    monkeypatch.setenv("HALO_MODELS_DIR", str(empty))
    w = make_window(engine="own")
    with qtbot.waitSignal(w.library.scanned, timeout=10_000):
        start_model(w, NO_ARGUMENTS)
    assert w.banner.title.text() == "Welcome to Halo Chat"
