"""The Discover page on real widgets against a loopback fake hub: search, a repo's files by quantization
with fit verdicts (small, huge, unsupported architecture, split), a download with progress in the page and
the status bar, pause and resume, the model joining the library; offline -> one sentence and Retry;
the token field."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from engine.hub import Machine
from tests.fake_hub import TOKEN, FakeHub, header_only_gguf
from tests.unit.gguf_builder import V, minimal_model

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]

GIB = 1 << 30
REPO = "test/Mixed-GGUF"
SMALL = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture
def hub(monkeypatch, tmp_path):
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HALO_MODELS_DIR", str(tmp_path / "models"))
        yield hub


def _row(table, filename: str) -> int:
    return next(r for r in range(table.rowCount()) if table.item(r, 1).text().startswith(filename))


def test_search_verdicts_download_pause_resume_into_the_library(qtbot, make_window, hub, smollm2_path, tmp_path):
    huge, huge_size = header_only_gguf()
    hub.add(REPO, SMALL, smollm2_path)
    hub.add(REPO, "Huge-70B-Q4_K_M.gguf", huge, size=huge_size, sha256="0" * 64)
    hub.add(REPO, "rwkv7-Q4_0.gguf", minimal_model(general__architecture=(V.STRING, "rwkv7")).build())
    for i in (1, 2):
        hub.add(REPO, f"Big-Q8_0-0000{i}-of-00002.gguf", b"GGUF" + bytes(64))
    w = make_window(engine="own")
    w.discover.machine = Machine(ram_free=16 * GIB, gpu_free=8 * GIB, gpu_name="Test GPU")
    w.models.show_library()
    button = next(b for b in w.models.library_dialog.findChildren(type(w.models.library_dialog.load_button))
                  if b.text().startswith("Discover"))
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    page = w.discover.page
    qtbot.waitUntil(page.isVisible, timeout=2_000)

    page.query.setText("mixed")
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.repos.count() == 1, timeout=10_000)
    item = page.repos.item(0)
    page.repos.itemClicked.emit(item)
    qtbot.waitUntil(lambda: page.files.rowCount() == 4 and all(
        page.files.item(r, 4).text() != "checking…" for r in range(4)), timeout=20_000)
    verdicts = {page.files.item(r, 1).text().split(" ")[0]: page.files.item(r, 4).text() for r in range(4)}
    assert verdicts == {SMALL: "fits on the GPU", "Huge-70B-Q4_K_M.gguf": "too large",
                        "rwkv7-Q4_0.gguf": "cannot run here", "Big-Q8_0-00001-of-00002.gguf": "cannot run here"}
    assert page.files.item(_row(page.files, "rwkv7"), 3).text() == "rwkv7"
    assert page.files.item(_row(page.files, "Huge"), 3).text() == "llama"

    page.files.selectRow(_row(page.files, "Big-Q8_0"))
    assert "split into 2 files" in page.verdict.text() and not page.download_button.isEnabled()
    page.files.selectRow(_row(page.files, "Huge"))
    assert "Does not fit on Test GPU" in page.verdict.text() and "does not fit there either" in page.verdict.text()
    page.files.selectRow(_row(page.files, SMALL))
    assert page.verdict.text().startswith("Fits on Test GPU: needs") and "GiB" in page.verdict.text()

    hub.throttle_bps = 10e6
    qtbot.mouseClick(page.download_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.downloads.rowCount() == 1 and "/s" in page.downloads.item(0, 2).text(),
                    timeout=10_000)
    assert "left" in page.downloads.item(0, 2).text()
    assert w.discover.status_label.text().startswith(f"↓ {SMALL}") and "/s" in w.discover.status_label.text()
    page.downloads.selectRow(0)
    qtbot.mouseClick(page.pause_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.downloads.item(0, 2).text().startswith("paused"), timeout=5_000)
    assert page.resume_button.isEnabled() and w.discover.status_label.text() == ""
    hub.throttle_bps = None
    qtbot.mouseClick(page.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.downloads.item(0, 2).text().startswith("downloaded and verified"), timeout=30_000)
    assert any(r.startswith("bytes=") and r != "bytes=0-" for r in hub.ranges)          # resumed mid-file
    path = str(tmp_path / "models" / SMALL)
    qtbot.waitUntil(lambda: w.library.entry(path) is not None, timeout=10_000)
    assert w.library.entry(path).ok and w.library.entry(path).architecture == "llama"
    w.discover._dialog.close()


def test_offline_says_one_sentence_and_retry_works_then_a_gated_repo_takes_a_token(qtbot, make_window, monkeypatch,
                                                                                   tmp_path):
    import socket

    refusing = socket.socket()                  # bound, never listening: connections are refused, and the
    refusing.bind(("127.0.0.1", 0))             # port stays ours until the hub starts on it
    port = refusing.getsockname()[1]
    w, page = _search_failing_at(f"http://127.0.0.1:{port}", "gated", qtbot, make_window, monkeypatch, tmp_path)
    assert "cannot be reached" in page.error.text() and page.retry_button.isVisible()
    assert page.error.text().count(". ") <= 1

    refusing.close()
    with FakeHub(port=port) as hub:
        hub.add("test/Gated-GGUF", "g-Q4_0.gguf", minimal_model().build())
        hub.gated.add("test/Gated-GGUF")
        qtbot.mouseClick(page.retry_button, Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: page.repos.count() == 1, timeout=10_000)
        assert not page.error_box.isVisible() and "gated" in page.repos.item(0).text()
        page.repos.itemClicked.emit(page.repos.item(0))
        qtbot.waitUntil(page.error_box.isVisible, timeout=10_000)
        assert "token" in page.error.text() and not page.retry_button.isVisible()

        page.token.setText(TOKEN)
        qtbot.keyClick(page.token, Qt.Key.Key_Return)
        assert page.token.text() == "" and "session only" in page.token_note.text()    # no keyring here
        page.repos.itemClicked.emit(page.repos.item(0))
        qtbot.waitUntil(lambda: page.files.rowCount() == 1, timeout=10_000)
    w.discover._dialog.close()


def test_a_download_interrupted_in_an_earlier_run_is_listed_paused_and_resumes(qtbot, make_window, hub,
                                                                              smollm2_path, tmp_path):
    import dataclasses
    import json

    from app.discover import JOURNAL_NAME
    from engine.hub import HubClient

    hub.add(REPO, SMALL, smollm2_path)
    [remote] = HubClient(endpoint=hub.endpoint).repo_files(REPO)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / (SMALL + ".part")).write_bytes(smollm2_path.read_bytes()[:5_000_000])
    (tmp_path / "data").mkdir(exist_ok=True)
    (tmp_path / "data" / JOURNAL_NAME).write_text(json.dumps([dataclasses.asdict(remote)]))
    w = make_window(engine="own")
    assert "1 download paused" in w.discover.status_label.text()
    w.discover.show(w)
    page = w.discover.page
    assert page.downloads.rowCount() == 1 and page.downloads.item(0, 2).text().startswith("paused · 5.0 MB")
    page.downloads.selectRow(0)
    qtbot.mouseClick(page.resume_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.downloads.item(0, 2).text().startswith("downloaded and verified"), timeout=30_000)
    assert hub.ranges == ["bytes=5000000-"]
    qtbot.waitUntil(lambda: w.library.entry(str(tmp_path / "models" / SMALL)) is not None, timeout=10_000)
    w.discover._dialog.close()


def _search_failing_at(endpoint: str, query: str, qtbot, make_window, monkeypatch, tmp_path):
    """The Discover page searching `query` against HF_ENDPOINT=`endpoint`, once its error box shows."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("HALO_MODELS_DIR", str(tmp_path / "models"))
    w = make_window(engine="own")
    w.discover.show(w)
    page = w.discover.page
    page.query.setText(query)
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(page.error_box.isVisible, timeout=15_000)
    return w, page


def test_a_malformed_hf_endpoint_is_named_in_the_page(qtbot, make_window, monkeypatch, tmp_path):
    w, page = _search_failing_at("http://[::1", "qwen", qtbot, make_window, monkeypatch, tmp_path)
    assert "HF_ENDPOINT" in page.error.text() and "http://[::1" in page.error.text()
    assert not page.retry_button.isVisible()
    w.discover._dialog.close()


# In a child process: this one imported engine.hub (and huggingface_hub) long ago, with a clean environment.
OPEN_THE_PAGE = """
from PySide6.QtWidgets import QApplication
app = QApplication([])
from app.discover import DiscoverActions
page = DiscoverActions().make_page()
print(page.error.text())
"""


def test_a_bad_hub_timeout_variable_is_named_in_the_page_not_a_crash(tmp_path):
    env = dict(os.environ, HF_HUB_DOWNLOAD_TIMEOUT="abc", HALO_DATA_DIR=str(tmp_path / "data"),
               HALO_MODELS_DIR=str(tmp_path / "models"), PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    done = subprocess.run([sys.executable, "-c", OPEN_THE_PAGE], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("HF_HUB_DOWNLOAD_TIMEOUT='abc' is not a whole number of seconds")
