"""Logs and crash traces in the user's log folder (`%LOCALAPPDATA%\\Halo Chat\\logs` on Windows).

`setup_logging()` is called once, first thing, by the frozen entry point (and may be called by any
other entry). It gives:
- `halo-chat.log`: the app's own log (rotated, 3 x 2 MB);
- `crash.log`: `faulthandler` output for ALL threads on a native fault (access violation, abort, ...),
  appended, with a header line per process so a trace can be matched with the log around it;
- uncaught Python exceptions on any thread written to the log (a windowed app has no console, so
  otherwise they vanish).

Contract: idempotent; never raises (a broken log folder must not stop the app: it falls back to the
temp folder, then to no file at all). The crash file object is kept open for the life of the process,
because faulthandler writes to its file descriptor from a signal handler.
"""
from __future__ import annotations

import datetime
import faulthandler
import logging
import logging.handlers
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

LOG_NAME = "halo-chat.log"
CRASH_NAME = "crash.log"
_FORMAT = "%(asctime)s %(levelname)-7s %(threadName)s %(name)s: %(message)s"


@dataclass(frozen=True)
class LogFiles:
    folder: Path
    log: Path
    crash: Path


_state: dict = {}          # "files": LogFiles, "crash_file": the open file faulthandler writes to


def default_log_dir() -> Path:
    from engine.paths import logs_dir  # HALO_DATA_DIR moves it (tests, portable installs)
    return logs_dir()


def setup_logging(folder: Path | None = None, level: int = logging.INFO) -> LogFiles | None:
    """Creates the log folder and installs the handlers. Returns where the files are (None: no folder
    could be written; logging then goes to stderr only, if there is one)."""
    if "files" in _state:
        return _state["files"]
    files = None
    for candidate in (folder or _safe_default(), Path(tempfile.gettempdir()) / "Halo Chat" / "logs"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            files = LogFiles(candidate, candidate / LOG_NAME, candidate / CRASH_NAME)
            _install(files, level)
            break
        except OSError:
            files = None
    if files is None and sys.stderr is not None:
        logging.basicConfig(level=level, format=_FORMAT)
    _install_excepthooks()
    _state["files"] = files
    if files is not None:
        logging.getLogger("halo").info("Halo Chat starting (pid %d, python %s, frozen=%s); logs in %s",
                                       os.getpid(), sys.version.split()[0], getattr(sys, "frozen", False),
                                       files.folder)
    return files


def _safe_default() -> Path:
    try:
        return default_log_dir()
    except Exception:   # noqa: BLE001 - platformdirs or a bad HALO_DATA_DIR: use the temp folder
        return Path(tempfile.gettempdir()) / "Halo Chat" / "logs"


def _install(files: LogFiles, level: int) -> None:
    handler = logging.handlers.RotatingFileHandler(files.log, maxBytes=2_000_000, backupCount=3,
                                                   encoding="utf-8")
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    crash_file = open(files.crash, "a", encoding="utf-8")   # noqa: SIM115 - must outlive this call
    stamp = datetime.datetime.now().isoformat(timespec="seconds")
    crash_file.write(f"--- {stamp} pid {os.getpid()}: faulthandler armed (all threads) ---\n")
    crash_file.flush()
    faulthandler.enable(file=crash_file, all_threads=True)
    _state["crash_file"] = crash_file


def _install_excepthooks() -> None:
    log = logging.getLogger("halo.uncaught")

    def on_exception(exc_type, exc, tb):
        log.critical("Uncaught exception", exc_info=(exc_type, exc, tb))
        if sys.stderr is not None:
            sys.__excepthook__(exc_type, exc, tb)

    def on_thread_exception(args: threading.ExceptHookArgs):
        if args.exc_type is SystemExit:
            return
        name = args.thread.name if args.thread else "?"
        log.critical("Uncaught exception in thread %s", name,
                     exc_info=(args.exc_type, args.exc_value, args.exc_traceback))

    sys.excepthook = on_exception
    threading.excepthook = on_thread_exception


def log_files() -> LogFiles | None:
    """Where this process logs, once `setup_logging` ran (for the diagnostics report and error dialogs)."""
    return _state.get("files")
