"""Running the server: headless (`python -m engine serve`, blocking) or in a thread (the app).

uvicorn serves `ModelServer.asgi`; its own access log is off because ours (`ModelServer._log`) escapes
client text. The thread form owns its event loop; `stop()` asks uvicorn to finish and joins.
"""
from __future__ import annotations

import logging
import socket
import sys
import threading
from collections.abc import Callable

import uvicorn

from engine.server.app import ModelServer
from engine.server.guard import ServerConfig


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on `host` right now (the OS picks it; another process could still take it first)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _uvicorn_config(server: ModelServer, config: ServerConfig) -> uvicorn.Config:
    return uvicorn.Config(server.asgi, host=config.host, port=config.port, access_log=False, log_level="warning",
                          lifespan="off", timeout_graceful_shutdown=2)


def serve_forever(engine, config: ServerConfig) -> None:
    """Blocks until interrupted (Ctrl-C / SIGTERM)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    server = ModelServer(engine, config)
    uv = uvicorn.Server(_uvicorn_config(server, config))
    scheme_host = f"[{config.host}]" if ":" in config.host else config.host
    print(f"serving {server.model_id()} at http://{scheme_host}:{config.port}/v1", flush=True)
    uv.run()


class ServerThread:
    """The server in a background thread of this process (the app's "Local server" switch)."""

    def __init__(self, engine, config: ServerConfig, on_log: Callable[[str], None] | None = None):
        self.config = config
        self.model_server = ModelServer(engine, config, on_log)
        self._uvicorn = uvicorn.Server(_uvicorn_config(self.model_server, config))
        self._thread = threading.Thread(target=self._run, name="halo-server", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._uvicorn.run()
        except BaseException as e:   # noqa: BLE001 - e.g. the port is taken (uvicorn exits via SystemExit)
            self.error = e

    def start(self, timeout: float = 10.0) -> None:
        """Returns once listening; raises OSError when it could not start (port in use, bad address)."""
        self._thread.start()
        waited = 0.0
        while not self._uvicorn.started and self._thread.is_alive() and waited < timeout:
            self._thread.join(0.05)
            waited += 0.05
        if not self._uvicorn.started:
            self.stop()
            raise OSError(f"the server could not listen on {self.config.host}:{self.config.port} "
                          "(is the port in use?)")

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and self._uvicorn.started

    def stop(self, timeout: float = 5.0) -> None:
        self._uvicorn.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout)
