"""Downloading one hub file safely, and a queue of them.

`download_file`: HTTP Range into `<name>.part` beside the destination, so a pause, a crash or a reboot
resumes where the bytes stop; a free-disk check first; the sha256 of the whole file checked against the
hub's LFS metadata before the `.part` is renamed into the models folder. A wrong hash refuses the file and
keeps the `.part` (nothing under the final name is ever unverified). The hub is untrusted: a listed name that is
no plain file name (`..`, `C:\\`, `NUL`, ...) is refused, a body is never written past the listed size, a server
that falls silent is asked again from the `.part`'s end (so pause and cancel act within POLL_S), a file of the
same name already in the folder is never overwritten, and a failed write is one sentence, not a traceback.

`DownloadManager`: several files queued, one downloading at a time on a worker thread; pause, resume,
cancel from any thread; every change reported as an immutable `DownloadState` to `on_update` (called on
the worker thread, or on the caller's thread for changes it makes itself). With a `journal` file the
unfinished downloads survive a crash or a reboot: a new manager lists them as paused, ready to resume.
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

import httpx2
from huggingface_hub.utils import get_session

from engine import file_names
from engine.errors import DownloadError, short_repr
from engine.hub.client import HubClient, RemoteFile, _raise_for_status, unreachable
from engine.hub.quants import split_part

log = logging.getLogger(__name__)
DISK_MARGIN = 64 << 20          # leave this much free beyond the file
READ_TIMEOUT_S = 60.0           # a server silent this long fails the download (resume continues it)
POLL_S = 1.0                    # no read of the body waits longer: pause and cancel act promptly on a stalled
                                # server (a server slow to answer at all gets doubled waits, up to READ_TIMEOUT_S)
Stop = Literal["pause", "cancel"]


class DownloadStopped(Exception):
    """The caller asked to stop (`how`: pause keeps the .part, cancel is the caller's to clean up)."""

    def __init__(self, how: Stop):
        super().__init__(how)
        self.how = how


def part_path(dest: Path) -> Path:
    return dest.with_name(dest.name + ".part")


MAX_NAME_BYTES = 255 - len(".part")      # most file systems allow 255 bytes (NTFS: 255 UTF-16 units)


def _name_problem(filename: str) -> str | None:
    """Why `filename` (a path in the repo) cannot be saved safely, or None."""
    for part in filename.split("/"):
        if part in ("", ".", ".."):
            return "it is an absolute path or holds an empty, '.' or '..' folder"
        if file_names.FORBIDDEN_CHARS.search(part):      # on Windows `\` and `C:` make a path, `:` a stream
            return "it holds a '\\', ':', a control character or another character Windows forbids"
        if file_names.names_a_device(part) or file_names.ends_badly(part):
            return "Windows reserves that name (a device name, or a trailing dot or space)"
    if len(filename.rsplit("/", 1)[-1].encode()) > MAX_NAME_BYTES:
        return f"the name is longer than {MAX_NAME_BYTES} bytes"
    return None


def destination(f: RemoteFile, folder: Path) -> Path:
    """Where `f` is saved: its name, directly in `folder`. Raises DownloadError for a name that could land
    elsewhere or not be a plain file (the hub's listing is untrusted)."""
    if (problem := _name_problem(f.filename)) is not None:
        raise DownloadError(f"The hub listed a file named {short_repr(f.filename)} in {f.repo_id}; it was refused "
                            f"because {problem}. Nothing was downloaded.")
    return folder / f.filename.rsplit("/", 1)[-1]


def check_downloadable(f: RemoteFile) -> None:
    """Refuses what the engine could not load once downloaded, or could not save safely: split GGUFs, files
    without a hash, names that are no plain file name."""
    destination(f, Path())
    if (split := split_part(f.filename)) is not None:
        raise DownloadError(f"{f.filename} is part {split[0]} of a model split into {split[1]} files; Halo Chat "
                            f"loads single-file GGUFs only: pick a single-file quantization.")
    if not f.sha256:
        raise DownloadError(f"The hub gave no sha256 for {f.filename}, so it could not be verified; not downloaded.")


def download_file(client: HubClient, f: RemoteFile, folder: Path,
                  progress: Callable[[int, int], None] | None = None,
                  stop: Callable[[], Stop | None] | None = None) -> Path:
    """Download `f` into `folder` (resuming a `.part`), verify it, move it into place; returns its path.

    Raises DownloadStopped when `stop()` asks, DownloadError (one sentence for the user) otherwise.
    Blocking: run it off the GUI thread."""
    check_downloadable(f)
    dest = destination(f, folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(dest):
            return _already_there(dest, f)
        part = part_path(dest)
        have = part.stat().st_size if part.is_file() else 0
        if have > f.size:
            part.unlink()
            have = 0
        _check_free_disk(folder, f.size - have, f.filename)
        if have < f.size:
            _fetch_into(client, f, part, have, progress, stop)
        _verify(part, f)
        os.replace(part, dest)
    except OSError as e:             # disk full, a read-only or vanished folder: the .part keeps what arrived
        raise DownloadError(f"Could not save {f.filename} in {folder}: {e.strerror or e}. Free some disk space or "
                            f"make the folder writable, then resume; the bytes downloaded so far are kept.") from None
    return dest


def _already_there(dest: Path, f: RemoteFile) -> Path:
    """`dest` exists: it is `f` (verified again: a same-sized file may be another model, or damaged), or the
    user's other file of that name, which is never overwritten."""
    if dest.is_file() and dest.stat().st_size == f.size and _sha256(dest) == f.sha256:
        return dest
    raise DownloadError(f"{dest} already exists and is not {f.repo_id}'s {f.filename} (its contents differ); "
                        f"rename or move it, then download again. It was left as it is.")


def _check_free_disk(folder: Path, need: int, name: str) -> None:
    free = shutil.disk_usage(folder).free
    if need + DISK_MARGIN > free:
        raise DownloadError(f"Not enough disk space for {name}: it needs {need / 1e9:.2f} GB more, and "
                            f"{folder} has {free / 1e9:.2f} GB free.")


class _Silent(Exception):
    """No byte for the wait: the request is dropped and, unless asked to stop, made again from the .part's end.
    args: the bytes on disk, and whether the server had answered at all."""


def _fetch_into(client: HubClient, f: RemoteFile, part: Path, have: int, progress, stop) -> None:
    """The rest of `f` into `part`. A server silent for POLL_S is asked again from where the bytes stop (so
    `stop` is heard within POLL_S), until READ_TIMEOUT_S pass without a byte."""
    quiet_since, wait = time.monotonic(), POLL_S
    while True:
        start = have
        try:
            have = _fetch_once(client, f, part, have, progress, stop, wait)
            return
        except _Silent as e:
            have, answered = e.args
        wait = POLL_S if answered else min(2 * wait, READ_TIMEOUT_S)
        if stop is not None and (how := stop()) is not None:
            raise DownloadStopped(how)
        if have != start:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > READ_TIMEOUT_S:
            raise DownloadError(f"The server stopped sending {f.filename} at {have / 1e6:.1f} of {f.size / 1e6:.1f} "
                                f"MB ({READ_TIMEOUT_S:.0f} s without a byte); resume to continue.")


def _fetch_once(client: HubClient, f: RemoteFile, part: Path, have: int, progress, stop, wait: float) -> int:
    """One ranged GET from `have`; returns the bytes on disk (f.size); raises _Silent after `wait` s of silence."""
    headers = {**client.headers(), "Range": f"bytes={have}-"}
    timeout = httpx2.Timeout(wait, connect=20.0)
    answered = False
    try:
        with get_session().stream("GET", client.url(f), headers=headers, follow_redirects=True,
                                  timeout=timeout) as r:
            answered = True
            if r.status_code == 416:                  # nothing left to send: the .part is complete
                return have
            _raise_for_status(r, f.filename)
            if r.status_code == 200:                  # the server ignored Range: start over
                have = 0
            elif not r.headers.get("Content-Range", "").startswith(f"bytes {have}-"):
                raise DownloadError(f"The server resumed {f.filename} at the wrong offset; retry.")
            with open(part, "r+b" if have else "wb") as out:
                out.seek(have)
                out.truncate()
                for chunk in r.iter_bytes():          # as bytes arrive: a slow server still shows progress
                    chunk = chunk[:f.size - have]     # never past the declared size: a body may be endless
                    out.write(chunk)
                    have += len(chunk)
                    if progress is not None:
                        progress(have, f.size)
                    if stop is not None and (how := stop()) is not None:
                        raise DownloadStopped(how)
                    if have == f.size:                # the hash decides if they were the right bytes
                        return have
    except httpx2.ReadTimeout:
        raise _Silent(have, answered) from None
    except httpx2.TransportError as e:
        if have == 0 and not part.exists():
            raise unreachable(client.endpoint, e) from None
        raise DownloadError(f"The download of {f.filename} was interrupted at {have / 1e6:.1f} of "
                            f"{f.size / 1e6:.1f} MB ({type(e).__name__}); resume to continue.") from None
    raise DownloadError(f"The server closed the download of {f.filename} at {have / 1e6:.1f} of "
                        f"{f.size / 1e6:.1f} MB; resume to continue.")


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as src:
        while chunk := src.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _verify(part: Path, f: RemoteFile) -> None:
    if not part.is_file():        # deleted while we wrote to it: the bytes went with it
        raise DownloadError(f"{part.name} was deleted during the download of {f.filename}; resume to download "
                            f"it again from the start.")
    digest = _sha256(part)
    if part.stat().st_size != f.size or digest != f.sha256:
        raise DownloadError(f"{f.filename} failed verification: its sha256 is {digest[:16]}…, the hub "
                            f"says {f.sha256[:16]}…. The file was not moved into the models folder; the partial "
                            f"file is kept ({part.name}): cancel to delete it.")


def _journal_entry(item) -> RemoteFile | None:
    """One journal entry as a RemoteFile, or None (logged) where it has other fields or types: the journal is a
    file anyone may edit, and one bad entry must not lose the others (nor raise in the app's start-up)."""
    fields = RemoteFile.__dataclass_fields__
    if not (isinstance(item, dict) and item.keys() == fields.keys()
            and all(isinstance(item[name], int if name == "size" else str) for name in fields)):
        log.warning("ignoring a download in the journal of another shape: %.200r", item)
        return None
    return RemoteFile(**item)


def _unfinished_in(f: RemoteFile, folder: Path) -> bool:
    """A journal entry still to download: its name is safe (the journal is a file anyone may edit) and no file
    of that name is in the folder yet."""
    try:
        return not os.path.lexists(destination(f, folder))
    except DownloadError as e:
        log.warning("ignoring a download in the journal: %s", e)
        return False


# --- the queue -----------------------------------------------------------------------------------------
Status = Literal["queued", "downloading", "paused", "done", "failed", "cancelled"]
UNFINISHED = ("queued", "downloading", "paused", "failed")       # listed in the journal, own their .part


@dataclass(frozen=True)
class DownloadState:
    id: int
    file: RemoteFile
    status: Status
    done: int = 0                 # bytes on disk
    speed: float = 0.0            # bytes per second over the last few seconds
    path: Path | None = None      # set when done
    error: str = ""               # set when failed

    @property
    def total(self) -> int:
        return self.file.size

    @property
    def eta_s(self) -> float | None:
        return (self.total - self.done) / self.speed if self.speed > 0 else None


class DownloadManager:
    """Owns one worker thread (started lazily). Thread-safe; `shutdown()` pauses the running download."""

    SPEED_WINDOW_S = 3.0
    UPDATE_EVERY_S = 0.1

    def __init__(self, folder: Path, client: HubClient, on_update: Callable[[DownloadState], None] | None = None,
                 journal: Path | None = None):
        self.folder = Path(folder)
        self.journal = journal
        self.client = client
        self.on_update = on_update or (lambda s: None)
        self._lock = threading.Condition()
        self._states: dict[int, DownloadState] = {}
        self._order: list[int] = []
        self._stop: dict[int, Stop] = {}
        self._next_id = 1
        self._thread: threading.Thread | None = None
        self._closing = False
        for f in self._read_journal():
            self._add(f, "paused")

    def _add(self, f: RemoteFile, status: Status) -> int:
        i, self._next_id = self._next_id, self._next_id + 1
        part = part_path(destination(f, self.folder))
        self._states[i] = DownloadState(i, f, status, part.stat().st_size if part.is_file() else 0)
        self._order.append(i)
        return i

    def _read_journal(self) -> list[RemoteFile]:
        if self.journal is None or not self.journal.is_file():
            return []
        try:
            items = json.loads(self.journal.read_text(encoding="utf-8"))
            if not isinstance(items, list):
                raise ValueError("not a list of downloads")
        except (OSError, ValueError) as e:          # a damaged journal loses the list, not the .part files
            log.warning("ignoring the download journal %s: %s", self.journal, e)
            return []
        files = [f for item in items if (f := _journal_entry(item)) is not None]
        return [f for f in files if _unfinished_in(f, self.folder)]

    def _write_journal(self) -> None:
        """Called with the lock held, after a status change (never per chunk)."""
        if self.journal is None:
            return
        unfinished = [dataclasses.asdict(s.file) for i in self._order
                      if (s := self._states[i]).status in UNFINISHED]
        try:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.journal.with_name(self.journal.name + ".tmp")
            tmp.write_text(json.dumps(unfinished), encoding="utf-8")
            os.replace(tmp, self.journal)
        except OSError as e:
            log.warning("could not write the download journal %s: %s", self.journal, e)

    def states(self) -> list[DownloadState]:
        with self._lock:
            return [self._states[i] for i in self._order]

    def enqueue(self, f: RemoteFile) -> int:
        """Queue `f` (again, if it failed); raises DownloadError at once for a file that would be refused anyway."""
        check_downloadable(f)
        with self._lock:
            i = self._unfinished_id(f)
            if i is None:
                i = self._add(f, "queued")
            elif self._states[i].status == "failed":        # one entry per file: two would share the .part
                self._states[i] = replace(self._states[i], status="queued", error="")
            else:
                return i
            self._write_journal()
            self._ensure_worker()
            self._lock.notify_all()
        self._emit(i)
        return i

    def _unfinished_id(self, f: RemoteFile) -> int | None:
        """The unfinished download of `f`, or None. Raises DownloadError when another file (another repo's of the
        same name) is unfinished under the same destination: both would write to one .part."""
        dest = destination(f, self.folder)
        for s in self._states.values():
            if s.status not in UNFINISHED:
                continue
            if s.file == f:
                return s.id
            if destination(s.file, self.folder) == dest:
                raise DownloadError(f"{f.repo_id}'s {f.filename} would be saved under the same name as "
                                    f"{s.file.repo_id}'s {s.file.filename}, still in the download list; finish or "
                                    f"cancel that one first.")
        return None

    def _ensure_worker(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="hub-downloads", daemon=True)
            self._thread.start()

    def pause(self, i: int) -> None:
        self._change(i, "pause")

    def cancel(self, i: int) -> None:
        self._change(i, "cancel")

    def resume(self, i: int) -> None:
        with self._lock:
            s = self._states[i]
            if s.status not in ("paused", "failed"):
                return
            self._states[i] = replace(s, status="queued", error="", speed=0.0)
            self._ensure_worker()
            self._lock.notify_all()
        self._emit(i)

    def shutdown(self, timeout: float = 10.0) -> None:
        with self._lock:
            self._closing = True
            for i, s in self._states.items():
                if s.status == "downloading":
                    self._stop[i] = "pause"
            self._lock.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _change(self, i: int, how: Stop) -> None:
        with self._lock:
            s = self._states[i]
            if s.status == "downloading":
                self._stop[i] = how            # the worker stops between chunks and reports
                return
            if s.status in ("done", "cancelled") or (how == "pause" and s.status != "queued"):
                return
            if how == "cancel":
                part_path(destination(s.file, self.folder)).unlink(missing_ok=True)
            self._states[i] = replace(s, status="paused" if how == "pause" else "cancelled", speed=0.0,
                                      done=0 if how == "cancel" else s.done)
            self._write_journal()
        self._emit(i)

    def _emit(self, i: int) -> None:
        with self._lock:
            s = self._states[i]
        self.on_update(s)

    def _next_queued(self) -> int | None:
        with self._lock:
            while not self._closing:
                for i in self._order:
                    if self._states[i].status == "queued":
                        self._states[i] = replace(self._states[i], status="downloading")
                        return i
                self._lock.wait()
            return None

    def _work(self) -> None:
        while (i := self._next_queued()) is not None:
            self._emit(i)
            self._run(i)

    def _run(self, i: int) -> None:
        f = self._states[i].file
        samples: collections.deque[tuple[float, int]] = collections.deque()
        last = [0.0]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            samples.append((now, done))
            while samples and now - samples[0][0] > self.SPEED_WINDOW_S:
                samples.popleft()
            if now - last[0] >= self.UPDATE_EVERY_S:
                last[0] = now
                t0, d0 = samples[0]
                speed = (done - d0) / (now - t0) if now > t0 else 0.0
                with self._lock:
                    self._states[i] = replace(self._states[i], done=done, speed=speed)
                self._emit(i)

        def stop() -> Stop | None:
            with self._lock:
                return self._stop.get(i)

        try:
            path = download_file(self.client, f, self.folder, progress, stop)
            new = {"status": "done", "path": path, "done": f.size}
        except DownloadStopped as e:
            if e.how == "cancel":
                part_path(destination(f, self.folder)).unlink(missing_ok=True)
            new = {"status": "paused" if e.how == "pause" else "cancelled"}
            if e.how == "cancel":
                new["done"] = 0
        except DownloadError as e:
            new = {"status": "failed", "error": str(e)}
        except Exception as e:                        # a bug must fail one download, never the thread
            new = {"status": "failed", "error": f"unexpected error: {type(e).__name__}: {e}"}
        with self._lock:
            self._stop.pop(i, None)
            part = part_path(destination(f, self.folder))
            if "done" not in new:
                new["done"] = part.stat().st_size if part.is_file() else 0
            self._states[i] = replace(self._states[i], speed=0.0, **new)
            self._write_journal()
        self._emit(i)
