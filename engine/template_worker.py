"""Chat templates compile and render in a separate, warm worker process with a hard time and memory bound.

Why a process: a limit enforced from another thread is not a limit. One long C-level call inside a
template (`[[0]*4000000]*100|string`, `|sum(start=[])`, a constant folded at compile time) holds the GIL
and freezes every thread of the process: the engine's and the GUI's. A child process can be killed
whatever it is doing, and its memory can be capped by the OS.

    worker = shared_worker()
    text = worker.request({"op": "render", "source": ..., "messages": [...], ...}, time_limit_s=2.0)

Contract:
- One warm child (`python -m engine.template_worker`; the frozen app's entry runs the same module),
  started on first use and restarted at once after it is killed, so renders stay fast (a round trip
  is well under a millisecond plus the render itself). Requests are serialized through one lock.
- Wall clock: the parent waits at most `time_limit_s + KILL_GRACE_S`; then it kills the child and raises
  TemplateError. The child also stops itself at `time_limit_s` where it can (engine.template_sandbox's
  trace function), which keeps the warm process for ordinary slow loops.
- Memory: on POSIX the child sets RLIMIT_AS to `WORKER_MEMORY_LIMIT` before reading any request, so the
  total of everything a template builds is bounded (not each value alone). Windows has no RLIMIT_AS;
  there only the time bound (kill) applies. A Job object memory limit is the Windows equivalent and is
  not done yet.
- Protocol: one JSON object per line each way on the child's stdin/stdout. JSON rather than pickle:
  the child runs hostile code (sandboxed), and the parent must never unpickle what it sends back.
"""
from __future__ import annotations

import json
import logging
import os
import queue
import subprocess
import sys
import threading
import time
from typing import Any

from engine.errors import TemplateError

log = logging.getLogger(__name__)

KILL_GRACE_S = 0.25                   # after the time limit, before the child is killed
WORKER_MEMORY_LIMIT = 512 << 20       # bytes of address space for the child (POSIX RLIMIT_AS)
START_TIMEOUT_S = 20.0                # a cold start on a loaded 2-core machine; only the first request
MODULE = "engine.template_worker"


def worker_command() -> list[str]:
    """How to start the child. The frozen app's entry point handles `-m MODULE` (installer/entry.py)."""
    return [sys.executable, "-m", MODULE, str(WORKER_MEMORY_LIMIT)]


class TemplateWorker:
    def __init__(self):
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._lines: queue.SimpleQueue | None = None
        self._ready = False               # the current child said it has imported everything
        self.restarts = 0                 # kills so far (tests, diagnostics)

    # ---- parent side -----------------------------------------------------------------------------
    def request(self, message: dict[str, Any], time_limit_s: float) -> dict[str, Any]:
        """Send one request, wait for its answer within the bound. Raises TemplateError on a timeout or a
        dead worker; returns the child's answer ({"ok": True, ...} or {"ok": False, "kind", "message"})."""
        line = (json.dumps(message) + "\n").encode("ascii")   # ASCII escapes: lone surrogates survive
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            self._await_ready()           # a cold child's imports are not the template's time
            proc, lines = self._proc, self._lines
            try:
                proc.stdin.write(line)
                proc.stdin.flush()
            except OSError:
                self._kill()
                raise TemplateError("the chat template worker stopped unexpectedly") from None
            wait = time_limit_s + KILL_GRACE_S
            try:
                answer = lines.get(timeout=wait)
            except queue.Empty:
                self._kill()
                self._start()             # warm again for the next request
                raise TemplateError(f"the chat template took longer than {time_limit_s:.1f} s and was "
                                    "stopped") from None
            if answer is None:            # EOF: the child died (the memory limit, most likely)
                self._kill()
                self._start()
                raise TemplateError("the chat template was stopped: it ran out of its memory allowance "
                                    f"({WORKER_MEMORY_LIMIT >> 20} MiB) or crashed its worker")
            return answer

    def warm_up(self, wait: bool = False) -> None:
        """Start the child now (loading a model does this, so the first chat is fast)."""
        with self._lock:
            if self._proc is None or self._proc.poll() is not None:
                self._start()
            if wait:
                self._await_ready()

    def _await_ready(self) -> None:
        if self._ready:
            return
        try:
            hello = self._lines.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            hello = None
        if not (isinstance(hello, dict) and hello.get("ready")):
            self._kill()
            raise TemplateError("the chat template worker did not start; chat templates cannot run")
        self._ready = True

    def close(self) -> None:
        with self._lock:
            self._kill()

    def _start(self) -> None:
        env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
        flags = getattr(subprocess, "CREATE_NO_WINDOW", 0)
        self._proc = subprocess.Popen(worker_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, env=env, creationflags=flags)
        self._lines = queue.SimpleQueue()
        self._ready = False
        threading.Thread(target=_read_lines, args=(self._proc.stdout, self._lines), daemon=True,
                         name="chat-template-worker-reader").start()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self.restarts += 1
        try:
            proc.kill()
        except OSError:
            pass
        threading.Thread(target=_reap, args=(proc,), daemon=True, name="chat-template-worker-reap").start()


def _reap(proc: subprocess.Popen) -> None:
    """Off the caller's path: a killed child with a big heap takes a moment to exit."""
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        log.warning("the chat template worker (pid %s) did not exit after kill", proc.pid)
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except OSError:
            pass


def _read_lines(stream, lines: queue.SimpleQueue) -> None:
    """Reader thread: one parsed answer per line; None at EOF (or a line that is not JSON)."""
    try:
        for raw in stream:
            try:
                lines.put(json.loads(raw))
            except ValueError:
                break
    except (OSError, ValueError):
        pass
    lines.put(None)


_shared: TemplateWorker | None = None
_shared_lock = threading.Lock()


def shared_worker() -> TemplateWorker:
    """The process-wide worker every ChatTemplate uses."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = TemplateWorker()
        return _shared


# ---- child side ------------------------------------------------------------------------------------
def _limit_memory(limit: int) -> None:
    try:
        import resource
    except ImportError:            # Windows: no RLIMIT_AS; the parent's kill is the bound
        return
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def child_main(argv: list[str]) -> int:
    from engine import template_sandbox as ct  # jinja2 and the sandbox live only here

    out = sys.stdout.buffer
    sys.stdout = sys.stderr                  # nothing but answers may reach the protocol stream
    _limit_memory(int(argv[0]) if argv else WORKER_MEMORY_LIMIT)
    out.write(b'{"ready": true}\n')
    out.flush()
    compiled: dict[tuple, Any] = {}
    for raw in sys.stdin.buffer:
        try:
            answer = _serve(json.loads(raw), compiled, ct)
        except MemoryError:
            compiled.clear()
            answer = {"ok": False, "message": "the chat template ran out of memory"}
        out.write((json.dumps(answer) + "\n").encode("ascii"))
        out.flush()
    return 0


def _serve(message: dict, compiled: dict, ct) -> dict:
    key = (message["source"], message["max_chars"])
    try:
        template = compiled.get(key)
        if template is None:
            template = ct.compile_template(message["source"], message["max_chars"])
            if len(compiled) >= 8:
                compiled.clear()
            compiled[key] = template
        if message["op"] == "compile":
            return {"ok": True}
        deadline = time.monotonic() + message["time_limit"]
        text = ct.render_compiled(template, message["context"], deadline, message["max_chars"])
        return {"ok": True, "text": text}
    except BaseException as e:      # noqa: BLE001 - every failure is an answer; the parent types it
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        return {"ok": False, "message": str(ct.as_template_error(e))}


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
