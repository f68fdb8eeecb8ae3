"""`HaloChat --forget-secrets` (installer/entry.py), which the uninstaller's purge runs: the hub token and every
listed server's key leave the OS keyring. Run against keyring's real Windows backend (WinVaultKeyring, with its
"{account}@{service}" targets for a second secret of one service) over an in-memory Credential Manager."""
from __future__ import annotations

import types

import keyring
import pytest
from keyring.backends import Windows

from app.remote_api import RemoteServer, normalize_base_url
from app.remote_models import save_servers
from app.settings import AppSettings
from engine.hub.token import load_token, save_token
from installer import entry

NOT_FOUND = 1168          # ERROR_NOT_FOUND, what CredRead and CredDelete raise for a missing target


class CredError(Exception):
    def __init__(self, winerror: int, funcname: str):
        super().__init__(winerror, funcname)
        self.winerror, self.funcname = winerror, funcname


@pytest.fixture
def vault(monkeypatch):
    """Credential Manager's generic credentials of this user, {target: credential}, behind WinVaultKeyring."""
    stored: dict[str, dict] = {}

    def read(Type, TargetName):
        if TargetName not in stored:
            raise CredError(NOT_FOUND, "CredRead")
        return dict(stored[TargetName], CredentialBlob=stored[TargetName]["CredentialBlob"].encode("utf-16"))

    def delete(Type, TargetName):
        if stored.pop(TargetName, None) is None:
            raise CredError(NOT_FOUND, "CredDelete")

    win32cred = types.SimpleNamespace(CRED_TYPE_GENERIC=1, CRED_PERSIST_ENTERPRISE=3, CredRead=read,
                                      CredWrite=lambda cred, flags: stored.__setitem__(cred["TargetName"], cred),
                                      CredDelete=delete)
    monkeypatch.setattr(Windows, "win32cred", win32cred, raising=False)
    monkeypatch.setattr(Windows, "pywintypes", types.SimpleNamespace(error=CredError), raising=False)
    before = keyring.get_keyring()
    keyring.set_keyring(Windows.WinVaultKeyring())
    yield stored
    keyring.set_keyring(before)


def test_forget_secrets_empties_the_credential_manager_of_the_apps_secrets(vault, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    urls = [normalize_base_url("http://10.0.0.2:8000"), normalize_base_url("http://127.0.0.1:9999")]
    save_token("hf_old")
    save_servers(AppSettings().q, [RemoteServer(urls[0], "key-1"), RemoteServer(urls[1], "key-2")])
    save_token("hf_new")                                 # saved again: keyring moves the older secrets aside
    assert load_token() == "hf_new" and len(vault) == 4 and "huggingface-token@Halo Chat" in vault
    vault["other-app"] = {"TargetName": "other-app", "UserName": "me", "CredentialBlob": "theirs"}

    assert entry.main(["--forget-secrets"]) == 0
    assert list(vault) == ["other-app"]
    assert load_token() is None
