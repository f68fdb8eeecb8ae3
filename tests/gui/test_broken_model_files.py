"""Model files that cannot be used, as the user meets them: a download that stopped part-way (the library row,
opening it and loading it all say to download it again), and a named pipe picked with "Open GGUF…" or listed in
the library (refused at once, instead of a background thread waiting forever for a writer)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
TINY = Path(__file__).resolve().parents[1] / "golden" / "data" / "tiny-llama-q4_1.gguf"
ADVICE = "download it again"          # what every place says of a cut file (app.error_messages.file_problem)
needs_fifo = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes made with mkfifo: POSIX only")


@pytest.fixture
def models(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("HALO_MODELS_DIR", str(folder))
    return folder


@pytest.fixture
def cut_download(models) -> Path:
    """The tiny model without its last kilobyte: the header is whole, the last tensor's data is not."""
    path = models / "cut.gguf"
    path.write_bytes(TINY.read_bytes()[:-1024])
    return path


def _open_library(qtbot, window):
    window.models.show_library()
    dlg = window.models.library_dialog
    qtbot.waitUntil(lambda: dlg.table.rowCount() == 1, timeout=10_000)
    return dlg


def test_a_cut_download_in_the_library_says_to_download_it_again(qtbot, make_window, cut_download):
    w = make_window(engine="own")
    dlg = _open_library(qtbot, w)
    dlg.select_path(str(cut_download))
    assert ADVICE in dlg.table.item(0, 0).toolTip().lower()
    assert ADVICE in dlg.estimate.text().lower()


def test_opening_a_cut_download_says_to_download_it_again(qtbot, make_window, cut_download):
    w = make_window(engine="own")
    with qtbot.waitSignal(w.library.inspected, timeout=10_000):
        w.models.open_path(str(cut_download))
    assert w.banner.isVisible()
    assert ADVICE in w.banner.body.text().lower()


def test_a_load_that_fails_on_a_cut_file_says_it_is_incomplete(qtbot, make_window, cut_download):
    """The file was whole when the library read it and cut since (or the load was asked for directly)."""
    w = make_window(engine="own")
    with qtbot.waitSignal(w.client.loadFailed, timeout=30_000):
        w.client.load(str(cut_download))
    assert w.banner.title.text().endswith("the file is incomplete")
    assert ADVICE in w.banner.body.text().lower()


@needs_fifo
def test_opening_a_named_pipe_is_refused_in_words(qtbot, make_window, tmp_path):
    pipe = tmp_path / "pipe.gguf"
    os.mkfifo(pipe)
    w = make_window(engine="own")
    with qtbot.waitSignal(w.library.inspected, timeout=10_000):
        w.models.open_path(str(pipe))
    assert w.banner.title.text() == "Cannot open pipe.gguf"
    assert "not a regular file" in w.banner.body.text()


@needs_fifo
def test_a_named_pipe_listed_in_the_library_is_shown_as_unusable(qtbot, make_window, settings, tmp_path, models):
    pipe = tmp_path / "pipe.gguf"
    os.mkfifo(pipe)
    settings.model_files = [str(pipe)]              # opened once from elsewhere: the library lists it
    w = make_window(engine="own")
    dlg = _open_library(qtbot, w)
    assert "not a regular file" in dlg.table.item(0, 0).toolTip()
