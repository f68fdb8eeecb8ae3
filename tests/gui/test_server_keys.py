"""Remote servers' API keys stay out of the settings file: kept in the OS keyring (engine.keychain) or, where
there is none, for this session only; a key an older version wrote in plain text is moved out on load."""
from __future__ import annotations

import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QMessageBox

from app.remote_api import RemoteServer, normalize_base_url
from app.remote_models import SETTINGS_KEY, save_servers, saved_servers
from app.settings import AppSettings
from tests.gui.conftest import when_modal_shown


def test_server_keys_never_reach_the_settings_file(isolated_user_dirs):
    settings = AppSettings()
    url = normalize_base_url("http://127.0.0.1:9999")
    save_servers(settings.q, [RemoteServer(url, "top-secret-key")])
    settings.q.sync()
    on_disk = open(settings.q.fileName(), encoding="utf-8").read()
    assert "top-secret-key" not in on_disk and "127.0.0.1:9999" in on_disk
    assert [(s.base_url, s.api_key) for s in saved_servers(settings.q)] == [(url, "top-secret-key")]


def test_a_plain_text_key_from_an_older_version_moves_out(isolated_user_dirs):
    settings = AppSettings()
    settings.q.setValue(SETTINGS_KEY, json.dumps([{"url": "http://10.0.0.2:8000", "key": "old-key"}]))
    settings.q.sync()
    assert [s.api_key for s in saved_servers(settings.q)] == ["old-key"]
    settings.q.sync()
    assert "old-key" not in open(settings.q.fileName(), encoding="utf-8").read()
    assert json.loads(str(settings.q.value(SETTINGS_KEY))) == [{"url": normalize_base_url("http://10.0.0.2:8000")}]


@pytest.mark.gui
@pytest.mark.qt_log_ignore("This plugin does not support")
def test_removing_a_server_asks_first_and_cancel_keeps_it_and_its_key(qtbot, make_window, settings):
    url = normalize_base_url("http://127.0.0.1:9")          # nothing listens: it is listed with its error
    save_servers(settings.q, [RemoteServer(url, "top-secret-key")])
    w = make_window(engine="own")
    w.models.show_library()
    box = w.remote.library_section()
    qtbot.waitUntil(lambda: box.tree.topLevelItemCount() == 1, timeout=10_000)
    box.tree.setCurrentItem(box.tree.topLevelItem(0))
    for answer, servers_left in ((QMessageBox.StandardButton.Cancel, 1), (QMessageBox.StandardButton.Yes, 0)):
        seen: list[str] = []

        def press(b, answer=answer, seen=seen):
            seen.append(b.text())
            b.button(answer).click()
        when_modal_shown(QMessageBox, press)
        qtbot.mouseClick(box.remove_button, Qt.MouseButton.LeftButton)
        assert url in seen[0] and "key" in seen[0]
        assert len(saved_servers(settings.q)) == servers_left == box.tree.topLevelItemCount()
        if servers_left:
            assert saved_servers(settings.q)[0].api_key == "top-secret-key"
    settings.q.setValue(SETTINGS_KEY, json.dumps([{"url": url}]))      # listed again by hand: no key comes back
    assert saved_servers(settings.q)[0].api_key == ""
