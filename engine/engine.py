"""`Engine`: one engine thread that owns the model; every other thread talks to it through queues.

Thread contract:
- all public methods are thread-safe and never block on the model (except `shutdown`, which joins);
- the engine thread alone touches the model, the KV cache and request state;
- commands (load, submit, abort, unload, shutdown) are drained between steps, so an abort takes effect
  at the next step boundary;
- a request's events go to its RequestHandle's queue: TextDelta*, then exactly one Finished.

The loop is `step = schedule -> execute -> update` over `Generation` objects. Today the schedule is
"the oldest request, one prefill chunk or one decode token"; engine/core's scheduler can replace
`_schedule` without touching the rest.
"""
from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from engine.api import Event, Finished, GenerateRequest, LoadProgress, ModelInfo, Usage
from engine.errors import ContextOverflowError, EngineError, ModelNotLoadedError, RequestAborted
from engine.generation import Generation, encode_prompt
from engine.model.step import KVCache, SequenceBlocks, StepInput
from engine.prompt import PromptFormat

DEFAULT_MAX_CONTEXT = 8192      # KV cache size cap (tokens); the model's trained context may be larger
DEFAULT_PREFILL_CHUNK = 256     # prompt tokens per step: bounds attention scratch and abort latency


class RequestHandle:
    """The caller's end of one request: iterate it (or `events()`) to receive its events in order."""

    def __init__(self, request_id: str, engine: Engine):
        self.request_id = request_id
        self._engine = engine
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self.finished: Finished | None = None

    def _put(self, event: Event) -> None:
        self._queue.put(event)

    def events(self, timeout: float | None = None) -> Iterator[Event]:
        """Yields events until (and including) Finished. `timeout`: max seconds to wait for each event;
        raises TimeoutError if none arrives in time."""
        while self.finished is None:
            try:
                event = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no event for {self.request_id} within {timeout} s") from None
            if isinstance(event, Finished):
                self.finished = event
            yield event

    __iter__ = events

    def text(self, timeout: float | None = None) -> tuple[str, Finished]:
        """Blocks until the request ends: (all its text, the Finished event)."""
        parts = [e.text for e in self.events(timeout) if not isinstance(e, Finished)]
        return "".join(parts), self.finished

    def abort(self) -> None:
        self._engine.abort(self.request_id)


@dataclass
class _Loaded:
    loaded: object              # engine.model.loader.LoadedModel
    prompt_format: PromptFormat
    kv: KVCache
    max_context: int


class Engine:
    def __init__(self, max_context: int = DEFAULT_MAX_CONTEXT, prefill_chunk: int = DEFAULT_PREFILL_CHUNK):
        self._max_context = max_context
        self._prefill_chunk = prefill_chunk
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._load_cancels: set[threading.Event] = set()    # one per load not yet finished
        self._load_lock = threading.Lock()
        self._model: _Loaded | None = None
        self._waiting: deque[tuple[GenerateRequest, RequestHandle]] = deque()
        self._running: tuple[Generation, SequenceBlocks] | None = None
        self._handles: dict[str, RequestHandle] = {}
        self.model_info: ModelInfo | None = None          # written by the engine thread only
        self._thread = threading.Thread(target=self._loop, name="halo-engine", daemon=True)
        self._stopped = False
        self._thread.start()

    # ---- public, any thread -----------------------------------------------------------------------
    def load(self, path: str | Path, progress: Callable[[LoadProgress], None] | None = None) -> Future:
        """Future[ModelInfo]. `progress` is called on the engine thread. Replaces a loaded model."""
        future: Future = Future()
        cancel = threading.Event()
        with self._load_lock:
            self._load_cancels.add(cancel)
        self._send(("load", Path(path), progress, future, cancel))
        return future

    def cancel_load(self) -> None:
        """Stops every load asked for so far (queued or in progress, at the next tensor); their futures fail
        with RequestAborted. Loads asked for afterwards are not affected."""
        with self._load_lock:
            for cancel in self._load_cancels:
                cancel.set()

    def unload(self) -> Future:
        future: Future = Future()
        self._send(("unload", future))
        return future

    def submit(self, request: GenerateRequest) -> RequestHandle:
        handle = RequestHandle(request.request_id, self)
        self._send(("submit", request, handle))
        return handle

    def abort(self, request_id: str) -> None:
        self._send(("abort", request_id))

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Aborts every request, frees the model and joins the engine thread. Idempotent."""
        if not self._stopped:
            self._stopped = True
            self.cancel_load()
            self._commands.put(("shutdown",))
        self._thread.join(timeout)

    def _send(self, command: tuple) -> None:
        if self._stopped:
            raise EngineError("The engine was shut down; create a new Engine.")
        self._commands.put(command)

    # ---- engine thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            busy = self._running is not None or bool(self._waiting)
            try:
                command = self._commands.get_nowait() if busy else self._commands.get()
            except queue.Empty:
                command = None
            if command is not None:
                if command[0] == "shutdown":
                    self._abort_all()
                    self._model = None
                    return
                self._handle(command)
                continue                      # drain every queued command before the next step
            self._step()

    def _handle(self, command: tuple) -> None:
        kind = command[0]
        if kind == "load":
            self._do_load(*command[1:])
        elif kind == "unload":
            self._abort_all()
            self._model = None
            self.model_info = None
            command[1].set_result(None)
        elif kind == "submit":
            request, handle = command[1:]
            self._handles[request.request_id] = handle
            self._waiting.append((request, handle))
        elif kind == "abort":
            self._abort(command[1])

    def _do_load(self, path: Path, progress, future: Future, cancel: threading.Event) -> None:
        try:
            if future.set_running_or_notify_cancel():
                self._load_into(path, progress, future, cancel)
        finally:
            with self._load_lock:
                self._load_cancels.discard(cancel)

    def _load_into(self, path: Path, progress, future: Future, cancel: threading.Event) -> None:
        from engine.model.loader import load_model

        def on_progress(fraction: float, message: str) -> None:
            if cancel.is_set():
                raise RequestAborted(f"Loading {path.name} was cancelled")
            if progress is not None:
                progress(LoadProgress(fraction, message))

        try:
            if cancel.is_set():                      # cancelled while queued: keep the current model
                raise RequestAborted(f"Loading {path.name} was cancelled")
            self._abort_all()
            self._model = None                       # free the old model before loading the new one
            self.model_info = None
            loaded = load_model(path, on_progress)
            prompt_format = PromptFormat.from_metadata(loaded.metadata)
            max_context = min(loaded.config.context_length, self._max_context)
            kv = KVCache.allocate(loaded.config, num_blocks=-(-max_context // 16), block_size=16)
            self._model = _Loaded(loaded, prompt_format, kv, max_context)
            self.model_info = loaded.info
            future.set_result(loaded.info)
        except BaseException as e:   # noqa: BLE001 - every failure goes to the caller's future
            future.set_exception(e if isinstance(e, Exception) else EngineError(str(e)))

    def _abort(self, request_id: str) -> None:
        if self._running is not None and self._running[0].request_id == request_id:
            self._running[0].finish("abort")
            self._running = None
            return
        for item in list(self._waiting):
            if item[0].request_id == request_id:
                self._waiting.remove(item)
                self._finish_unstarted(item[0], "abort")

    def _abort_all(self) -> None:
        if self._running is not None:
            self._running[0].finish("abort")
            self._running = None
        while self._waiting:
            self._finish_unstarted(self._waiting.popleft()[0], "abort")

    def _finish_unstarted(self, request: GenerateRequest, reason, error: str | None = None) -> None:
        handle = self._handles.pop(request.request_id, None)
        if handle is not None:
            handle._put(Finished(request.request_id, reason, Usage(), error=error))

    def _emit(self, event: Event) -> None:
        handle = self._handles.get(event.request_id)
        if handle is None:
            return
        if isinstance(event, Finished):
            del self._handles[event.request_id]
        handle._put(event)

    # ---- one step: schedule -> execute -> update --------------------------------------------------
    def _step(self) -> None:
        generation = None
        try:
            scheduled = self._schedule()
            if scheduled is None:
                return
            generation, step, samples = scheduled
            logits = self._model.loaded.model.forward(step, self._model.kv)      # [1, vocab]
            if samples:
                generation.on_logits(logits[0])
        except Exception as e:   # noqa: BLE001 - a failed step fails its request, never the engine
            generation = generation or (self._running[0] if self._running else None)
            if generation is not None:
                generation.finish("error", error=f"Generation failed: {type(e).__name__}: {e}")
        if generation is not None and generation.finished:
            self._running = None

    def _schedule(self) -> tuple[Generation, StepInput, bool] | None:
        """The next step of the oldest request: a prefill chunk, or one decode token. Admits a waiting
        request when none runs. Returns (generation, step, whether this step yields a token)."""
        if self._running is None:
            if not self._waiting:
                return None
            request, _ = self._waiting.popleft()
            self._running = self._admit(request)
            if self._running is None:
                return None
        generation, blocks = self._running
        if blocks.length < len(generation.prompt_ids):
            chunk = generation.prompt_ids[blocks.length: blocks.length + self._prefill_chunk]
            step = blocks.step(chunk)
            return generation, step, blocks.length == len(generation.prompt_ids)
        return generation, blocks.step([generation.output_ids[-1]]), True

    def _admit(self, request: GenerateRequest) -> tuple[Generation, SequenceBlocks] | None:
        """Encodes and checks a request; on any problem it finishes with reason "error" and returns None."""
        m = self._model
        try:
            if m is None:
                raise ModelNotLoadedError("No model is loaded; load one before sending a request.")
            prompt_ids = encode_prompt(m.prompt_format, request)
            if not prompt_ids:
                raise EngineError("The prompt is empty.")
            if len(prompt_ids) >= m.max_context:
                raise ContextOverflowError(
                    f"The prompt is {len(prompt_ids)} tokens but the context holds {m.max_context}; "
                    f"shorten the conversation or the prompt.")
            if max(prompt_ids) >= m.loaded.config.vocab_size or min(prompt_ids) < 0:
                raise EngineError("The prompt has token ids outside the model's vocabulary.")
            tokenizer = m.prompt_format.tokenizer
            generation = Generation(request, prompt_ids, tokenizer, tokenizer.stop_ids, m.max_context, self._emit)
            if request.params.max_tokens <= 0:
                generation.finish("length")
                return None
        except Exception as e:   # noqa: BLE001 - a bad request fails alone
            message = str(e) if isinstance(e, EngineError) else f"Invalid request: {type(e).__name__}: {e}"
            self._finish_unstarted(request, "error", message)
            return None
        return generation, SequenceBlocks(m.kv)
