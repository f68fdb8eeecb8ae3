"""Secrets (the hub access token for gated repos, remote servers' API keys): kept in the OS keyring (Windows
Credential Manager, macOS Keychain, Secret Service) where one is available, otherwise for this process only.
Never written to settings files."""
from __future__ import annotations

import logging

SERVICE = "Halo Chat"
# engine.hub.token's account. Here, not there: the uninstaller's purge (installer/entry.py's forget_secrets) forgets
# it without importing engine.hub, whose import loads huggingface_hub and may refuse a malformed HF_* variable.
HUB_TOKEN_ACCOUNT = "huggingface-token"
log = logging.getLogger(__name__)
_session: dict[str, str] = {}          # account -> secret, where no keyring holds it


def _keyring():
    try:
        import keyring
        from keyring.backends.fail import Keyring as NoBackend
    except ImportError:
        return None
    return None if isinstance(keyring.get_keyring(), NoBackend) else keyring


def keyring_available() -> bool:
    return _keyring() is not None


def load_secret(account: str) -> str | None:
    """The keyring's secret for `account`, else this session's."""
    if (kr := _keyring()) is not None:
        try:
            if stored := kr.get_password(SERVICE, account):
                return stored
        except Exception as e:          # a locked or broken keyring is a reason to ask again, not to crash
            log.warning("keyring read failed: %s", e)
    return _session.get(account)


def save_secret(account: str, secret: str) -> bool:
    """Remember `secret`; True when the OS keyring holds it (it survives a restart), False: this session only."""
    secret = secret.strip()
    if not secret:
        forget_secret(account)
        return False
    _session[account] = secret
    if (kr := _keyring()) is not None:
        try:
            kr.set_password(SERVICE, account, secret)
            return True
        except Exception as e:
            log.warning("keyring write failed, keeping the secret for this session only: %s", e)
    return False


def forget_secret(account: str) -> None:
    _session.pop(account, None)
    if (kr := _keyring()) is not None:
        try:
            kr.delete_password(SERVICE, account)
        except Exception:
            pass                          # nothing stored is fine
