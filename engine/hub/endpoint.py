"""The hub's address: an endpoint given by the caller, else HF_ENDPOINT (a mirror), else huggingface_hub's default.

Checked here, before `huggingface_hub` is imported (engine.hub's __init__): that library parses HF_ENDPOINT at
import and raises a bare ValueError for a malformed URL (`http://[::1`); a port over 65535 raised one at the first
request, and a value that is no http(s) URL (`foo`, `ftp://x`, empty) failed as "cannot be reached". All are
InvalidEndpointError here, naming the value and where it came from. This module imports nothing of `huggingface_hub`.

The library parses two more variables at import, with int(): HF_HUB_ETAG_TIMEOUT and HF_HUB_DOWNLOAD_TIMEOUT (`abc`,
`1.5` or an empty value: a bare ValueError). `check_timeouts` names them first, as InvalidTimeoutError.
"""
from __future__ import annotations

import os
import re
from urllib.parse import urlsplit

from engine.errors import DownloadError, short_repr

ENV = "HF_ENDPOINT"
EXAMPLE_MIRROR = "https://hf-mirror.com"
_SPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")
TIMEOUT_ENVS = ("HF_HUB_ETAG_TIMEOUT", "HF_HUB_DOWNLOAD_TIMEOUT")    # seconds; huggingface_hub.constants reads them


class InvalidEndpointError(DownloadError):
    """HF_ENDPOINT, or the endpoint a caller gave, is not an http(s) URL with a host."""


class InvalidTimeoutError(DownloadError):
    """HF_HUB_ETAG_TIMEOUT or HF_HUB_DOWNLOAD_TIMEOUT is set to something that is no whole number."""


def check_timeouts() -> None:
    """Raises InvalidTimeoutError for the first of TIMEOUT_ENVS that huggingface_hub could not import with."""
    for name in TIMEOUT_ENVS:
        value = os.environ.get(name)
        if value is None:
            continue
        try:
            int(value)                   # the library's own parse: exactly what it refuses is refused here
        except ValueError:
            raise InvalidTimeoutError(f"{name}={short_repr(value)} is not a whole number of seconds; set it to one "
                                      f"such as 30, or unset it to use huggingface_hub's default.") from None


def checked_endpoint(endpoint: str | None = None) -> str | None:
    """`endpoint` if given, else HF_ENDPOINT if set, checked and without a trailing slash; None: neither is set
    (huggingface_hub's default applies). Raises InvalidEndpointError."""
    if endpoint is not None:
        return _check(endpoint, f"The hub endpoint {short_repr(endpoint)}", "give a URL such as " + EXAMPLE_MIRROR)
    value = os.environ.get(ENV)
    if value is None:
        return None
    return _check(value, f"{ENV}={short_repr(value)}",
                  f"set {ENV} to a mirror's URL such as {EXAMPLE_MIRROR}, or unset it to use huggingface.co")


def _check(value: str, what: str, advice: str) -> str:
    if _SPACE_OR_CONTROL.search(value):
        reason = "it holds a space or a control character"     # urlsplit drops tabs and newlines silently
    else:
        reason = _url_problem(value)
    if reason is not None:
        raise InvalidEndpointError(f"{what} is not a valid hub address ({reason}); {advice}.")
    return value.rstrip("/")


def _url_problem(value: str) -> str | None:
    try:
        parts = urlsplit(value)
        _ = parts.port                   # raises ValueError for a port that is no number or over 65535
    except ValueError as e:
        return str(e)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "not an http:// or https:// URL with a host"
    return None
