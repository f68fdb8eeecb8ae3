"""The hub access token (gated repos): kept in the OS keyring (Windows Credential Manager, macOS Keychain,
Secret Service) where one is available, otherwise for this process only. Never written to settings files."""
from __future__ import annotations

import logging
import os

SERVICE = "Halo Chat"
ACCOUNT = "huggingface-token"
log = logging.getLogger(__name__)
_session_token: str | None = None


def _keyring():
    try:
        import keyring
        from keyring.backends.fail import Keyring as NoBackend
    except ImportError:
        return None
    return None if isinstance(keyring.get_keyring(), NoBackend) else keyring


def keyring_available() -> bool:
    return _keyring() is not None


def load_token() -> str | None:
    """HF_TOKEN from the environment, else the keyring's, else this session's."""
    if env := os.environ.get("HF_TOKEN"):
        return env
    if (kr := _keyring()) is not None:
        try:
            if stored := kr.get_password(SERVICE, ACCOUNT):
                return stored
        except Exception as e:          # a locked or broken keyring is a reason to ask again, not to crash
            log.warning("keyring read failed: %s", e)
    return _session_token


def save_token(token: str) -> bool:
    """Remember `token`; True when the OS keyring holds it (it survives a restart), False: this session only."""
    global _session_token
    _session_token = token.strip() or None
    if (kr := _keyring()) is not None and _session_token:
        try:
            kr.set_password(SERVICE, ACCOUNT, _session_token)
            return True
        except Exception as e:
            log.warning("keyring write failed, keeping the token for this session only: %s", e)
    return False


def forget_token() -> None:
    global _session_token
    _session_token = None
    if (kr := _keyring()) is not None:
        try:
            kr.delete_password(SERVICE, ACCOUNT)
        except Exception:
            pass                          # nothing stored is fine
