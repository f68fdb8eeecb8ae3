"""A real `python -m engine serve` process on a free loopback port, for the server tests."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from engine.server.run import free_port

STARTUP_TIMEOUT_S = 120.0


class ServerProcess:
    def __init__(self, model: Path, *args: str):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"halo-serve-{self.port}.log"
        self._log = open(self.log_path, "w+b")
        cmd = [sys.executable, "-m", "engine", "serve", "--model", str(model), "--port", str(self.port),
               "--backend", "cpu", *args]
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log()}")
            try:
                if httpx.get(self.base + "/health", timeout=2).status_code in (200, 401):
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not start within {STARTUP_TIMEOUT_S} s: {self.log()}")

    def log(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._log.close()
        self.log_path.unlink(missing_ok=True)
