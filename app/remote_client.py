"""A remote server's model as a chat source: the same face as EngineClient towards ChatController
(`model`, `submit`, `abort`, signals `delta` and `finished`), over app/remote_api.py on worker threads.

Threads: one worker thread per reply (it blocks on the HTTP stream, never touches Qt objects) puts plain
tuples into a SimpleQueue; a QTimer on the GUI thread drains it every ~33 ms, so deltas are coalesced as
EngineClient's are. Stop is immediate for the window (the `finished` with reason "abort" is sent at once);
the worker closes the stream at its next chunk, which the server sees as the client going away.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass

from PySide6.QtCore import QObject, QTimer, Signal

from app.engine_client import DRAIN_INTERVAL_MS
from app.remote_api import RemoteError, RemoteServer, list_models, stream_chat
from engine.api import Finished, GenerateRequest, ModelInfo, Usage

REMOTE_BACKEND = "server"        # ModelInfo.backend is "server:<host:port>" for a remote model
UNKNOWN_CONTEXT = 1 << 20        # a server that does not say: the conversation's own setting bounds it


@dataclass(frozen=True)
class RemoteModel:
    server: RemoteServer
    model_id: str
    context_length: int = 0      # from the server's /models entry when it says (vLLM: max_model_len)

    def info(self) -> ModelInfo:
        """How the window, the status bar and the history name this model."""
        return ModelInfo(path=f"{self.server.base_url}#{self.model_id}", name=f"{self.model_id} @ {self.server.label}",
                         architecture="remote", file_size=0, quantization="", parameters=0,
                         context_length=self.context_length or UNKNOWN_CONTEXT, has_chat_template=True,
                         backend=f"{REMOTE_BACKEND}:{self.server.label}")


def models_of(server: RemoteServer) -> list[RemoteModel]:
    """Blocks (worker thread); raises RemoteError."""
    out = []
    for m in list_models(server):
        ctx = m.get("max_model_len") or (m.get("meta") or {}).get("n_ctx_train") or 0
        out.append(RemoteModel(server, m["id"], ctx if isinstance(ctx, int) else 0))
    return out


class ModelLister(QObject):
    """Lists a server's models off the GUI thread: `listed(server, [RemoteModel])` or `failed(server, words)`."""

    listed = Signal(object, object)
    failed = Signal(object, str)

    def list(self, server: RemoteServer) -> None:
        threading.Thread(target=self._run, args=(server,), name="remote-models", daemon=True).start()

    def _run(self, server: RemoteServer) -> None:
        try:
            signal, args = self.listed, (server, models_of(server))
        except RemoteError as e:
            signal, args = self.failed, (server, str(e))
        except Exception as e:   # noqa: BLE001 - never lost: shown in words
            signal, args = self.failed, (server, f"Listing the models of {server.label} failed: "
                                                 f"{type(e).__name__}: {e}")
        try:
            signal.emit(*args)                  # queued onto the GUI thread (the receiver's)
        except RuntimeError:                    # the window closed meanwhile: nobody to tell
            pass


class RemoteChatClient(QObject):
    """Chat with one remote model at a time. GUI thread only; every method returns at once."""

    delta = Signal(str, str)                  # request_id, text since the last delta signal
    finished = Signal(object)                 # engine.api.Finished, exactly one per submitted request

    def __init__(self, parent: QObject | None = None, read_timeout: float | None = None):
        super().__init__(parent)
        self.remote: RemoteModel | None = None
        self.model: ModelInfo | None = None
        self.read_timeout = read_timeout      # seconds between two chunks; None: the default
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._stops: dict[str, threading.Event] = {}     # live requests
        self._timer = QTimer(self, interval=DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self._drain)

    @property
    def busy(self) -> bool:
        return bool(self._stops)

    def use(self, remote: RemoteModel) -> None:
        self.remote, self.model = remote, remote.info()

    def submit(self, request: GenerateRequest) -> str:
        rid = request.request_id
        stop = threading.Event()
        self._stops[rid] = stop
        self._timer.start()
        if self.remote is None:
            self._events.put(("finished", Finished(rid, "error", Usage(), error="No server model is chosen.")))
            return rid
        threading.Thread(target=self._stream, args=(self.remote, request, stop), name=f"remote-{rid}",
                         daemon=True).start()
        return rid

    def abort(self, request_id: str) -> None:
        stop = self._stops.pop(request_id, None)
        if stop is not None:
            stop.set()
            self.finished.emit(Finished(request_id, "abort", Usage()))

    def shutdown(self) -> None:
        for rid in list(self._stops):
            self._stops.pop(rid).set()
        self._timer.stop()

    def _stream(self, remote: RemoteModel, request: GenerateRequest, stop: threading.Event) -> None:
        # Worker thread: blocks on the HTTP stream; only queue puts.
        rid = request.request_id
        kw = {"read_timeout": self.read_timeout} if self.read_timeout else {}
        try:
            fin = stream_chat(remote.server, remote.model_id, request,
                              lambda text: self._events.put(("delta", rid, text)), stop.is_set, **kw)
        except Exception as e:   # noqa: BLE001 - still exactly one Finished
            fin = Finished(rid, "error", Usage(), error=f"The reply from {remote.server.label} failed: "
                                                        f"{type(e).__name__}: {e}")
        self._events.put(("finished", fin))

    def _drain(self) -> None:
        texts: dict[str, list[str]] = {}
        finishes = []
        while True:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                break
            if item[0] == "delta":
                texts.setdefault(item[1], []).append(item[2])
            else:
                finishes.append(item[1])
        for rid, parts in texts.items():
            if rid in self._stops:
                self.delta.emit(rid, "".join(parts))
        for fin in finishes:
            if self._stops.pop(fin.request_id, None) is not None:   # an aborted one was finished already
                self.finished.emit(fin)
        if not self._stops and self._events.empty():
            self._timer.stop()
