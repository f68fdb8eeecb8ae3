"""The log folder and faulthandler: a native fault on any thread leaves every thread's stack in crash.log."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"HALO_DATA_DIR": str(tmp_path / "data"), "PATH": ""})


def test_native_fault_writes_all_threads_to_crash_log(tmp_path):
    result = _run("""
        import faulthandler, threading, time
        from app.logging_setup import setup_logging
        files = setup_logging()
        print(files.folder, flush=True)
        worker = threading.Thread(target=time.sleep, args=(30,), name="engine-like", daemon=True)
        worker.start()
        faulthandler._sigsegv()
    """, tmp_path)
    assert result.returncode != 0
    logs = tmp_path / "data" / "logs"
    assert result.stdout.strip() == str(logs)
    crash = (logs / "crash.log").read_text()
    assert "faulthandler armed (all threads)" in crash
    assert "Segmentation fault" in crash
    assert "Current thread 0x" in crash and "\nThread 0x" in crash   # the faulting one and the sleeping worker
    assert "Halo Chat starting" in (logs / "halo-chat.log").read_text()


def test_uncaught_thread_exception_goes_to_the_log(tmp_path):
    result = _run("""
        import threading
        from app.logging_setup import setup_logging
        setup_logging()
        def boom():
            raise RuntimeError("worker exploded")
        t = threading.Thread(target=boom, name="worker-7")
        t.start(); t.join()
    """, tmp_path)
    assert result.returncode == 0
    log = (tmp_path / "data" / "logs" / "halo-chat.log").read_text()
    assert "Uncaught exception in thread worker-7" in log and "RuntimeError: worker exploded" in log


def test_unwritable_log_folder_falls_back_to_temp(tmp_path):
    blocker = tmp_path / "data"
    blocker.write_text("a file where the data folder should be")
    result = _run("""
        from app.logging_setup import setup_logging
        print(setup_logging().folder)
    """, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Halo Chat" in result.stdout and str(blocker) not in result.stdout
