"""The bridge between the Engine (its own thread, no Qt) and the GUI thread.

Shape: engine callbacks and one reader thread per request push plain tuples into a SimpleQueue; a
QTimer on the GUI thread drains it every ~33 ms (30 Hz) while work is in flight and turns them into
signals. That gives both guarantees the window needs:
- the GUI thread never blocks on the engine (every call here returns at once);
- deltas are coalesced: however fast the model, each request gets at most one `delta` signal per tick.
Every exception becomes a signal (`loadFailed`, or a `Finished` with reason "error"); none is lost.
"""
from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal

from engine.api import Finished, GenerateRequest, LoadProgress, ModelInfo, PromptProgress, TextDelta, Usage
from engine.errors import EngineError, RequestAborted

DRAIN_INTERVAL_MS = 33


def _default_engine_factory(backend: str, async_scheduling: bool, kv_cache_type: str | None):
    from engine.engine import Engine  # imported late: starting the app must not wait for numpy & co.

    kv = {} if kv_cache_type is None else {"kv_cache_type": kv_cache_type}      # None: the Engine's default
    return Engine(backend=backend, async_scheduling=async_scheduling, **kv)


class EngineClient(QObject):
    """Owns one Engine. All methods: GUI thread only, non-blocking (except `shutdown`)."""

    loadStarted = Signal(str)                 # path
    loadProgress = Signal(float, str)         # fraction 0..1, message
    loaded = Signal(object)                   # ModelInfo
    loadFailed = Signal(str, object)          # path, the exception (EngineError for expected failures)
    loadCancelled = Signal(str)               # path
    unloaded = Signal()
    delta = Signal(str, str)                  # request_id, text since the last delta signal
    reasoning = Signal(str, str)              # request_id, reasoning (TextDelta.reasoning) since the last one
    finished = Signal(object)                 # engine.api.Finished, exactly one per submitted request
    promptProgress = Signal(str, int, int)    # request_id, prompt tokens processed, total (newest per tick)

    def __init__(self, backend: str = "auto", async_scheduling: bool = True,
                 engine_factory: Callable | None = None, engine=None, parent: QObject | None = None,
                 kv_cache_type: str | None = None):
        """`engine`: an existing Engine to talk to, which this client then does not shut down (tests
        share one loaded engine between windows); otherwise `engine_factory(backend, async, kv_cache_type)`
        makes one. `kv_cache_type`: the Settings' KV cache precision (None: the Engine's default)."""
        super().__init__(parent)
        self._factory = engine_factory or _default_engine_factory
        self._backend = backend
        self._async = async_scheduling
        self._kv_cache_type = kv_cache_type
        self._engine = engine
        self._owns_engine = engine is None
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._load_future: Future | None = None
        self._loading_path = ""
        self._load_serial = 0     # numbers each load: its progress events carry it (the same file may load twice)
        self._streams: set[str] = set()
        self.model: ModelInfo | None = getattr(engine, "model_info", None)
        self._timer = QTimer(self, interval=DRAIN_INTERVAL_MS)
        self._timer.timeout.connect(self._drain)

    # -- state ------------------------------------------------------------------------------------
    @property
    def backend(self) -> str:
        return self._backend

    @property
    def kv_cache_type(self) -> str | None:
        """The KV cache type the next engine is made with (ModelInfo.kv_cache_type: what a loaded model got)."""
        return self._kv_cache_type

    @property
    def engine(self):
        """The Engine of the moment, or None before the first load (a reconfigure replaces it). For the
        local server, which serves whatever this engine has loaded, batched with the window's chats."""
        return self._engine

    @property
    def is_loading(self) -> bool:
        return self._load_future is not None

    @property
    def busy(self) -> bool:
        return bool(self._streams)

    def _ensure_engine(self):
        if self._engine is None:
            self._engine = self._factory(self._backend, self._async, self._kv_cache_type)
        return self._engine

    def reconfigure(self, backend: str, async_scheduling: bool, kv_cache_type: str | None = None) -> None:
        """Takes effect at the next load: the current engine is shut down then (streams end first).
        `kv_cache_type` None keeps the current one."""
        kv_cache_type = self._kv_cache_type if kv_cache_type is None else kv_cache_type
        if (backend, async_scheduling, kv_cache_type) != (self._backend, self._async, self._kv_cache_type):
            self._backend, self._async, self._kv_cache_type = backend, async_scheduling, kv_cache_type
            self._retire_engine()

    def _retire_engine(self) -> None:
        engine, self._engine = self._engine, None
        owned, self._owns_engine = self._owns_engine, True
        self.model = None
        if engine is not None and owned:
            # shutdown joins the engine thread: do it off the GUI thread.
            threading.Thread(target=engine.shutdown, name="engine-shutdown", daemon=True).start()

    # -- loading ----------------------------------------------------------------------------------
    def load(self, path: str | Path, context: int | None = None) -> None:
        """`context`: tokens to allocate (the "Context length" setting); the engine caps it at the model's
        trained length and reports what it allocated as ModelInfo.max_context."""
        path = str(path)
        if self._load_future is not None:
            self.cancel_load()
        for request_id in list(self._streams):
            self.abort(request_id)
        try:
            engine = self._ensure_engine()
            self._load_serial += 1
            serial = self._load_serial
            future = engine.load(path, progress=lambda p: self._events.put(("progress", serial, p)),
                                 max_context=context)
        except Exception as e:   # noqa: BLE001 - a construction failure is shown, not raised into Qt
            self.loadFailed.emit(path, e)
            return
        self._load_future, self._loading_path = future, path
        future.add_done_callback(lambda f: self._events.put(("load_done", path, f)))
        self.loadStarted.emit(path)
        self._timer.start()

    def cancel_load(self) -> None:
        future = self._load_future
        if future is None:
            return
        cancel = getattr(self._engine, "cancel_load", None)
        if cancel is not None:
            cancel()
        else:
            future.cancel()

    def unload(self) -> None:
        """No model afterwards: a load in progress is cancelled too. The engine runs the unload after that load
        however it ends, so its result is dropped here rather than reported as the model now loaded."""
        if self._engine is None or (self.model is None and self._load_future is None):
            return
        for request_id in list(self._streams):
            self.abort(request_id)
        if self._load_future is not None:
            path = self._loading_path
            self.cancel_load()
            self._load_future, self._loading_path = None, ""
            self.loadCancelled.emit(path)
        self._engine.unload()
        self.model = None
        self.unloaded.emit()

    # -- generation -------------------------------------------------------------------------------
    def submit(self, request: GenerateRequest) -> str:
        """Starts streaming `request`; its events arrive as `delta` and then one `finished` signal."""
        rid = request.request_id
        self._streams.add(rid)
        self._timer.start()
        try:
            handle = self._ensure_engine().submit(request)
        except Exception as e:   # noqa: BLE001 - no model, engine gone: still exactly one Finished
            self._events.put(("event", _error_finished(rid, e)))
            return rid
        threading.Thread(target=self._read_stream, args=(rid, handle), name=f"stream-{rid}",
                         daemon=True).start()
        return rid

    def abort(self, request_id: str) -> None:
        """Cooperative: the engine stops between steps and still sends its Finished (reason "abort")."""
        if self._engine is not None and request_id in self._streams:
            self._engine.abort(request_id)

    def _read_stream(self, rid: str, handle) -> None:
        # Reader thread: blocks on the handle, never touches Qt objects.
        got_finished = False
        try:
            for event in handle:
                self._events.put(("event", event))
                if isinstance(event, Finished):
                    got_finished = True
                    break
        except Exception as e:   # noqa: BLE001
            if not got_finished:
                self._events.put(("event", _error_finished(rid, e)))
                got_finished = True
        if not got_finished:
            self._events.put(("event", _error_finished(rid, RuntimeError("the engine ended the stream "
                                                                         "without finishing it"))))

    # -- GUI-thread side --------------------------------------------------------------------------
    def _drain(self) -> None:
        pending_text: dict[str, list[str]] = {}
        pending_reasoning: dict[str, list[str]] = {}
        prompt_progress: dict[str, PromptProgress] = {}
        finishes: list[Finished] = []
        progress: tuple | None = None
        load_done: tuple | None = None
        while True:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                break
            kind = item[0]
            if kind == "event":
                event = item[1]
                if isinstance(event, TextDelta):
                    pending_text.setdefault(event.request_id, []).append(event.text)
                    if event.reasoning:
                        pending_reasoning.setdefault(event.request_id, []).append(event.reasoning)
                elif isinstance(event, PromptProgress):
                    prompt_progress[event.request_id] = event
                elif isinstance(event, Finished):
                    finishes.append(event)
            elif kind == "progress" and item[1] == self._load_serial:
                progress = item     # a replaced load may still report: only the load under way reaches the bar
            elif kind == "load_done":
                load_done = item
        for rid, parts in pending_reasoning.items():      # before the answer: thinking comes first
            if rid in self._streams:
                self.reasoning.emit(rid, "".join(parts))
        for rid, p in prompt_progress.items():
            if rid in self._streams:
                self.promptProgress.emit(rid, p.processed, p.total)
        for rid, parts in pending_text.items():
            text = "".join(parts)
            if text and rid in self._streams:
                self.delta.emit(rid, text)
        for fin in finishes:
            if fin.request_id in self._streams:
                self._streams.discard(fin.request_id)
                self.finished.emit(fin)
        if progress is not None and self._load_future is not None:
            p: LoadProgress = progress[2]
            self.loadProgress.emit(p.fraction, p.message)
        if load_done is not None:
            self._complete_load(load_done[1], load_done[2])
        if not self._streams and self._load_future is None and self._events.empty():
            self._timer.stop()

    def _complete_load(self, path: str, future: Future) -> None:
        if future is not self._load_future:
            return   # an older load that was replaced
        self._load_future, self._loading_path = None, ""
        try:
            info = future.result(timeout=0)
        except CancelledError:
            self.model = getattr(self._engine, "model_info", None)
            self.loadCancelled.emit(path)
            return
        except Exception as e:   # noqa: BLE001
            # A failed load keeps the old model, unless both did not fit at once: ask what is loaded now.
            self.model = getattr(self._engine, "model_info", None)
            if _is_cancellation(e):
                self.loadCancelled.emit(path)
            else:
                self.loadFailed.emit(path, e)
            return
        self.model = info
        self.loaded.emit(info)

    def shutdown(self) -> None:
        """Blocks until the engine thread has stopped (call once, at exit)."""
        self._timer.stop()
        engine, self._engine = self._engine, None
        if engine is not None:
            for request_id in list(self._streams):
                engine.abort(request_id)
            if self._owns_engine:
                engine.shutdown()
        self._streams.clear()


def _is_cancellation(e: BaseException) -> bool:
    # Engine.cancel_load makes the load's future fail with RequestAborted.
    return isinstance(e, RequestAborted)


def _error_finished(rid: str, e: BaseException) -> Finished:
    if isinstance(e, EngineError):
        message = str(e)
    else:
        message = f"Internal error: {type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
    return Finished(request_id=rid, reason="error", usage=Usage(), error=message)
