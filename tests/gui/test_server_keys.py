"""Remote servers' API keys stay out of the settings file: kept in the OS keyring (engine.keychain) or, where
there is none, for this session only; a key an older version wrote in plain text is moved out on load."""
from __future__ import annotations

import json

from app.remote_api import RemoteServer, normalize_base_url
from app.remote_models import SETTINGS_KEY, save_servers, saved_servers
from app.settings import AppSettings


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
