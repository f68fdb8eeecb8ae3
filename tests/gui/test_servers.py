"""The app and servers, through the real widgets: the app as a client of our own `python -m engine serve`
(a real subprocess on a free loopback port, the starter model), errors in words, and File > Local server…
serving the window's loaded model on the same engine as its chats."""
from __future__ import annotations

import socket
import threading
import time

import httpx
import pytest
from PySide6.QtCore import Qt

from app.remote_api import RemoteServer
from app.remote_client import RemoteModel
from tests.gui.conftest import FAST, LONG
from tests.server.serving import ServerProcess, free_port

openai = pytest.importorskip("openai")

pytestmark = [pytest.mark.gui, pytest.mark.golden, pytest.mark.qt_log_ignore("This plugin does not support")]
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def server(smollm2_path):
    srv = ServerProcess(smollm2_path, "--api-key", KEY)
    yield srv
    srv.stop()


def _use(window, sampling):
    window.store.set_conversation_settings(window.current_id, "", sampling.to_dict())


def _add_server(qtbot, w, url: str, key: str):
    w.models.show_library()
    box = w.remote.box
    qtbot.mouseClick(box.add_button, Qt.MouseButton.LeftButton)
    dlg = w.remote.add_dialog
    dlg.url_edit.setText(url)
    dlg.key_edit.setText(key)
    qtbot.mouseClick(dlg.add_button, Qt.MouseButton.LeftButton)
    return box


def test_the_app_chats_with_our_own_server_and_stop_closes_the_stream(qtbot, make_window, server):
    w = make_window(engine="own")                          # nothing loaded locally
    box = _add_server(qtbot, w, server.base, KEY)          # typed without /v1: the app adds it
    qtbot.waitUntil(lambda: bool(box.model_items()), timeout=15_000)
    item = box.model_items()[0]
    assert item.text(0) == "SmolLM2-135M-Instruct.Q4_1"
    box.tree.setCurrentItem(item)
    qtbot.mouseClick(box.use_button, Qt.MouseButton.LeftButton)
    label = f"127.0.0.1:{server.port}"
    assert not w.models.library_dialog.isVisible()
    assert label in w.status.model_label.text() and w.status.backend_label.text() == f"Backend: Server ({label})"
    assert label in w.model_button.text()

    # a long reply streams into the chat view; Stop ends it and closes the HTTP stream
    _use(w, LONG)
    w.composer.edit.setPlainText("Tell me a long story about a dragon.")
    with qtbot.waitSignal(w.chat.streamUpdated, timeout=30_000):
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    with qtbot.waitSignal(w.chat.streamFinished, timeout=5_000) as done:
        qtbot.mouseClick(w.composer.stop_button, Qt.MouseButton.LeftButton)
    _cid, mid, fin = done.args
    reply = w.store.message(mid)
    assert fin.reason == "abort" and reply.state == "stopped"
    assert reply.content and reply.content == w.chat_view.view(mid).text()
    assert reply.model == f"SmolLM2-135M-Instruct.Q4_1 @ {label}"
    qtbot.waitUntil(lambda: "client gone" in server.log(), timeout=10_000)
    auth = {"Authorization": f"Bearer {KEY}"}
    qtbot.waitUntil(lambda: httpx.get(server.base + "/health", headers=auth).json()["live_requests"] == 0,
                    timeout=10_000)

    # a whole reply is the server's own answer to the same conversation (greedy), with usage
    w.new_conversation()
    _use(w, FAST)
    w.composer.edit.setPlainText("Name three colors.")
    with qtbot.waitSignal(w.chat.streamFinished, timeout=30_000) as done:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    _cid, mid, fin = done.args
    reply = w.store.message(mid)
    assert fin.reason in ("stop", "length") and reply.state == "complete"
    direct = openai.OpenAI(base_url=server.base + "/v1", api_key=KEY, max_retries=0).chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "Name three colors."}],
        max_tokens=FAST.max_tokens, temperature=0)
    assert reply.content == direct.choices[0].message.content
    assert fin.usage.generated_tokens == direct.usage.completion_tokens
    assert w.chat_view.view(mid).text() == reply.content


def test_server_errors_are_words_and_nothing_typed_is_lost(qtbot, make_window, server):
    w = make_window(engine="own")
    # a wrong key: the server stays listed with the reason
    box = _add_server(qtbot, w, server.base + "/v1", "wrong")
    qtbot.waitUntil(lambda: "refused" in box.status_of(server.base + "/v1"), timeout=15_000)
    assert "API key" in box.status_of(server.base + "/v1")
    # a bad address is explained in the dialog, which keeps what was typed
    qtbot.mouseClick(box.add_button, Qt.MouseButton.LeftButton)
    dlg = w.remote.add_dialog
    dlg.url_edit.setText("http://host:port")
    qtbot.mouseClick(dlg.add_button, Qt.MouseButton.LeftButton)
    assert dlg.isVisible() and "port" in dlg.error_label.text() and dlg.url_edit.text() == "http://host:port"
    dlg.reject()
    # nothing listening there
    dead = f"http://127.0.0.1:{free_port()}/v1"
    _add_server(qtbot, w, dead, "")
    qtbot.waitUntil(lambda: "Cannot reach" in box.status_of(dead), timeout=15_000)
    assert [s.base_url for s in w.remote.servers] == [server.base + "/v1", dead]    # kept for the next start

    # a model the server does not have: the reply fails in words, the question stays
    w.remote.use(RemoteModel(RemoteServer(server.base + "/v1", KEY), "no-such-model"))
    w.composer.edit.setPlainText("Hello there")
    with qtbot.waitSignal(w.chat.streamFinished, timeout=15_000) as done:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    fin = done.args[2]
    assert fin.reason == "error" and "no model named 'no-such-model'" in fin.error and "404" in fin.error
    assert "Traceback" not in fin.error
    assert w.banner.isVisible() and "no-such-model" in w.banner.body.text()
    assert [(m.role, m.content) for m in w.store.messages(w.current_id)][0] == ("user", "Hello there")

    # a server that accepts the connection and never answers: a timeout, in words
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        w.remote.client.read_timeout = 1.0
        w.remote.use(RemoteModel(RemoteServer(f"http://127.0.0.1:{silent.getsockname()[1]}/v1"), "m"))
        w.composer.edit.setPlainText("Are you there?")
        with qtbot.waitSignal(w.chat.streamFinished, timeout=15_000) as done:
            qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    assert done.args[2].reason == "error" and "did not answer within 1 s" in done.args[2].error
    assert w.store.messages(w.current_id)[-2].content == "Are you there?"


def test_local_server_switch_serves_the_loaded_model_beside_the_chats(qtbot, make_window, shared_engine):
    w = make_window()
    w.local_server.show_panel()
    panel = w.local_server.panel
    panel.lan_check.setChecked(True)
    assert panel.lan_warning.isVisible() and "without a key" in panel.lan_warning.text()
    panel.lan_check.setChecked(False)
    assert not panel.lan_warning.isVisible()
    port = free_port()
    panel.port_spin.setValue(port)
    panel.key_edit.setText("k1")
    with qtbot.waitSignal(w.local_server.server.started, timeout=15_000):
        panel.switch.setChecked(True)
    base = f"http://127.0.0.1:{port}/v1"
    assert "Serving SmolLM2-135M-Instruct.Q4_1 at" in panel.status_label.text() and base in panel.status_label.text()
    assert w.local_server.status_note.text() == f"Server: {base}"
    assert not panel.port_spin.isEnabled()
    assert httpx.get(base + "/models").status_code == 401
    client = openai.OpenAI(base_url=base, api_key="k1", max_retries=0, timeout=60)
    assert [m.id for m in client.models.list().data] == ["SmolLM2-135M-Instruct.Q4_1"]

    # a server request while the window streams a reply: both live in the one engine at once
    _use(w, LONG)
    w.composer.edit.setPlainText("Tell me a long story about a dragon.")
    with qtbot.waitSignal(w.chat.streamUpdated, timeout=30_000):
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    result = {}
    t = threading.Thread(target=lambda: result.update(r=client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", messages=[{"role": "user", "content": "Hi"}], max_tokens=8,
        temperature=0)))
    t.start()
    most_live = 0
    while t.is_alive():
        most_live = max(most_live, shared_engine.stats().live_requests)
        qtbot.wait(20)
    assert result["r"].usage.completion_tokens > 0 and most_live == 2
    with qtbot.waitSignal(w.chat.streamFinished, timeout=10_000):
        w.stop()
    qtbot.waitUntil(lambda: "POST /v1/chat/completions" in panel.log_view.toPlainText(), timeout=5_000)

    with qtbot.waitSignal(w.local_server.server.stopped, timeout=15_000):
        panel.switch.setChecked(False)
    assert panel.status_label.text() == "Off." and not w.local_server.status_note.isVisible()
    time.sleep(0.1)
    with pytest.raises(httpx.ConnectError):
        httpx.get(base + "/models")


def test_the_server_panel_opens_with_a_hand_edited_port(qtbot, make_window):
    from engine.server import DEFAULT_PORT

    w = make_window(engine="own")
    w.settings.q.setValue("server/port", "notaport")
    w.local_server.show_panel()
    assert w.local_server.panel.port_spin.value() == DEFAULT_PORT
    w.local_server.panel.close()
    w.local_server.panel = None
    w.settings.q.setValue("server/port", "8123")          # as the INI file gives a saved port back
    w.local_server.show_panel()
    assert w.local_server.panel.port_spin.value() == 8123
    w.local_server.panel.close()
