"""The hub access token for gated repos: HF_TOKEN, else the OS keyring (engine.keychain), else this session's."""
from __future__ import annotations

import os

from engine.keychain import HUB_TOKEN_ACCOUNT, forget_secret, keyring_available, load_secret, save_secret

__all__ = ["keyring_available", "load_token", "save_token", "forget_token"]


def load_token() -> str | None:
    """HF_TOKEN from the environment, else the keyring's, else this session's."""
    return os.environ.get("HF_TOKEN") or load_secret(HUB_TOKEN_ACCOUNT)


def save_token(token: str) -> bool:
    return save_secret(HUB_TOKEN_ACCOUNT, token)


def forget_token() -> None:
    forget_secret(HUB_TOKEN_ACCOUNT)
