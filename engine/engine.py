"""`Engine`: one engine thread that owns the model; every other thread talks to it through queues.

Thread contract:
- all public methods are thread-safe and never block on the model (except `shutdown`, which joins);
- the engine thread alone touches the model, the KV cache and request state (it owns the EngineCore);
- commands (load, submit, abort, unload, shutdown) are drained between steps, so an abort takes effect
  at the next step boundary;
- a request's events go to its RequestHandle's queue: TextDelta*, then exactly one Finished.

Between commands the loop calls `EngineCore.step()`: continuous batching of up to `max_num_seqs`
requests, chunked prefill, and (where the backend's probe proves a safe readback) async scheduling.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from engine.api import Event, Finished, GenerateRequest, LoadProgress, ModelInfo, TextDelta, Usage
from engine.context_fit import OVERFLOW_POLICIES, Fitted, fit_messages, reply_room
from engine.core.engine_core import EngineCore
from engine.core.setup import DEFAULT_MAX_NUM_SEQS, BackendChoice
from engine.errors import (
    ContextOverflowError,
    EngineError,
    ModelNotLoadedError,
    OutOfDeviceMemoryError,
    OutOfHostMemoryError,
    RequestAborted,
    UnsupportedModelError,
)
from engine.generation import Generation, encode_prompt
from engine.model import arch
from engine.prompt import PromptFormat, normalize_messages
from engine.reasoning import reasoning_parser

DEFAULT_MAX_CONTEXT = 8192      # KV cache size cap (tokens); the model's trained context may be larger


class RequestHandle:
    """The caller's end of one request: iterate it (or `events()`) to receive its events in order."""

    def __init__(self, request_id: str, engine: Engine, sink: Callable[[Event], None] | None = None):
        self.request_id = request_id
        self._engine = engine
        self._queue: queue.SimpleQueue[Event] = queue.SimpleQueue()
        self._sink = sink
        self.finished: Finished | None = None

    def _put(self, event: Event) -> None:
        if self._sink is None:
            self._queue.put(event)
            return
        if isinstance(event, Finished):
            self.finished = event
        try:
            self._sink(event)
        except Exception:   # noqa: BLE001 - a caller's broken sink must not stop the engine thread
            pass

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
        parts = [e.text for e in self.events(timeout) if isinstance(e, TextDelta)]
        return "".join(parts), self.finished

    def abort(self) -> None:
        """Aborts this handle's request; nothing once it has ended, even where its id now names another request
        (a duplicate id refused, or an id used again after this one finished)."""
        self._engine._send(("abort", self.request_id, self))


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for diagnostics and tests (Engine.stats)."""

    model_loaded: bool
    live_requests: int            # submitted and not yet finished (encoding, waiting or running)
    running: int
    waiting: int
    kv_blocks_total: int
    kv_blocks_free: int
    steps_in_flight: int
    max_context: int = 0          # tokens one request may hold with the loaded model (0: none loaded)
    kv_cache_bytes: int = 0       # bytes the loaded model's KV cache (and recurrent state) occupies


@dataclass
class _Loaded:
    info: ModelInfo
    prompt_format: PromptFormat
    vocab_size: int
    core: EngineCore
    max_context: int


class Engine:
    """`backend`: "auto" (default: the probe's first available backend), "cpu", "cuda", "hip" or a registry
    name; a GPU choice falls back to the CPU (reason in `backend_reason`) when the GPU forward pass is
    missing. `async_scheduling`: the user's setting; it is on only where the probe also proves a safe
    readback (see `async_reason`). `max_num_seqs`: requests batched together (continuous batching).
    `prefill_chunk`: prompt tokens per step; None: the chosen device's default (core.setup.DEFAULT_PREFILL_CHUNK).
    `kv_cache_type`: the KV cache's element type, engine.model.arch.KV_CACHE_TYPES: "f32" (default, exact) or
    "f16" (GPU only: half the KV memory); a model on the CPU gets "f32" whatever is asked, and the loaded
    ModelInfo.kv_cache_type says which it got. An unknown name raises ValueError here."""

    def __init__(self, max_context: int = DEFAULT_MAX_CONTEXT, prefill_chunk: int | None = None,
                 backend: str = "auto", async_scheduling: bool = True, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                 kv_cache_tokens: int | None = None, kv_cache_type: str = arch.DEFAULT_KV_CACHE_TYPE):
        arch.kv_cache_type(kv_cache_type, "gpu")          # refuse an unknown name before the thread starts
        self._max_context = max_context
        self._prefill_chunk = prefill_chunk
        self._backend_setting = backend
        self._async_setting = async_scheduling
        self._max_num_seqs = max_num_seqs
        self._kv_cache_tokens = kv_cache_tokens
        self._kv_cache_type = kv_cache_type
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._load_cancels: set[threading.Event] = set()    # one per load not yet finished
        self._load_lock = threading.Lock()
        self._model: _Loaded | None = None
        self._handles: dict[str, RequestHandle] = {}
        self.model_info: ModelInfo | None = None          # written by the engine thread only
        self.backend_reason = ""                          # why the loaded model runs where it runs
        self.async_reason = ""                            # why async scheduling is on/off for it
        # Prompts are rendered and tokenized here, off the engine thread (a long prompt must not stall
        # every other request's steps). One worker per kind keeps each kind in arrival order: chats, whose
        # template may take its whole time limit (a hostile one takes it every time), and raw text or ids, which
        # never wait behind a template.
        self._chat_encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="halo-prompt-chat")
        self._raw_encoder = ThreadPoolExecutor(max_workers=1, thread_name_prefix="halo-prompt-raw")
        self._thread = threading.Thread(target=self._loop, name="halo-engine", daemon=True)
        self._stopped = False
        self._thread.start()

    # ---- public, any thread -----------------------------------------------------------------------
    def load(self, path: str | Path, progress: Callable[[LoadProgress], None] | None = None,
             max_context: int | None = None) -> Future:
        """Future[ModelInfo]. `progress` is called on the engine thread. Replaces a loaded model once the new
        one is ready (a cancelled or failed load keeps it, unless both did not fit in memory at once).
        `max_context`: the context (tokens) to allocate for this model, capped at its trained length;
        None keeps the engine's setting. The loaded ModelInfo.max_context says what was allocated."""
        if max_context is not None and (not isinstance(max_context, int) or max_context < 1):
            raise ValueError(f"max_context must be a positive number of tokens, not {max_context!r}")
        future: Future = Future()
        cancel = threading.Event()
        with self._load_lock:
            self._load_cancels.add(cancel)
        self._send(("load", Path(path), progress, future, cancel, max_context))
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

    def submit(self, request: GenerateRequest, sink: Callable[[Event], None] | None = None) -> RequestHandle:
        """Never raises for a bad request: its handle gets Finished(reason="error") with the reason (a
        duplicate request_id fails the new handle only; the first one runs on). `sink`: when given, each
        event is handed to `sink(event)` on the engine thread instead of the handle's queue (it must not
        block: e.g. `loop.call_soon_threadsafe(queue.put_nowait, event)` for asyncio)."""
        handle = RequestHandle(request.request_id, self, sink)
        self._send(("submit", request, handle))
        return handle

    @property
    def max_context(self) -> int:
        """Tokens one request may hold (prompt + reply) with the loaded model, else the configured cap."""
        m = self._model
        return m.max_context if m is not None else self._max_context

    @property
    def kv_cache_type(self) -> str:
        """The KV cache type this engine asks for (ModelInfo.kv_cache_type: what the loaded model got; the CPU
        keeps f32)."""
        return self._kv_cache_type

    @property
    def chat_template_source(self) -> str | None:
        """The loaded model's chat template text (None: no model, or a completion-only model)."""
        m = self._model
        return m.prompt_format.template_source if m is not None else None

    def stats(self, timeout: float = 10.0) -> EngineStats:
        """Counts read on the engine thread between steps (so consistent); waits up to `timeout`."""
        future: Future = Future()
        self._send(("stats", future))
        return future.result(timeout)

    def abort(self, request_id: str) -> None:
        """Aborts the live request with this id, whichever handle sent it (RequestHandle.abort aborts its own)."""
        self._send(("abort", request_id, None))

    def set_fault_injector(self, injector: Callable | None) -> Future:
        """TESTS ONLY: `injector(scheduler_output)` runs on the engine thread before each step launches and
        may raise to simulate a failing step. Future[None] done once installed (needs a loaded model)."""
        future: Future = Future()
        self._send(("fault", injector, future))
        return future

    def shutdown(self, timeout: float | None = 30.0) -> None:
        """Aborts every request, frees the model and joins the engine thread. Idempotent."""
        if not self._stopped:
            self._stopped = True
            self.cancel_load()
            self._commands.put(("shutdown",))
        self._thread.join(timeout)
        for encoder in (self._chat_encoder, self._raw_encoder):
            encoder.shutdown(wait=False, cancel_futures=True)

    def _send(self, command: tuple) -> None:
        if self._stopped:
            raise EngineError("The engine was shut down; create a new Engine.")
        self._commands.put(command)

    # ---- engine thread ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            busy = self._model is not None and self._model.core.has_work
            try:
                command = self._commands.get_nowait() if busy else self._commands.get()
            except queue.Empty:
                command = None
            if command is not None:
                if command[0] == "shutdown":
                    self._drop_model()
                    return
                self._handle(command)
                continue                      # drain every queued command before the next step
            try:
                if not self._model.core.step():
                    raise RuntimeError("the scheduler has unfinished requests but nothing it can run")
            except Exception as e:            # noqa: BLE001 - a core bug must not kill the engine thread
                self._fail_everything(f"Generation failed: engine error: {type(e).__name__}: {e}")

    def _handle(self, command: tuple) -> None:
        kind = command[0]
        if kind == "load":
            self._do_load(*command[1:])
        elif kind == "unload":
            self._drop_model()
            command[1].set_result(None)
        elif kind == "submit":
            self._accept(*command[1:])
        elif kind == "encoded":
            self._admit(*command[1:])
        elif kind == "stats":
            command[1].set_result(self._stats())
        elif kind == "abort":
            request_id, handle = command[1:]
            if handle is not None and self._handles.get(request_id) is not handle:
                pass                                     # that handle's request is over; the id may be another's
            elif self._model is None or not self._model.core.abort(request_id):
                self._finish_unstarted(request_id, "abort")
        elif kind == "fault":
            injector, future = command[1:]
            if self._model is None:
                future.set_exception(ModelNotLoadedError("no model loaded"))
            else:
                self._model.core.runner.fault_injector = injector
                future.set_result(None)

    def _do_load(self, path: Path, progress, future: Future, cancel: threading.Event,
                 max_context: int | None) -> None:
        try:
            if future.set_running_or_notify_cancel():
                self._load_into(path, progress, future, cancel, max_context or self._max_context)
        finally:
            with self._load_lock:
                self._load_cancels.discard(cancel)

    def _load_into(self, path: Path, progress, future: Future, cancel: threading.Event, max_context: int) -> None:
        from engine.backend_choice import choose_backend

        def on_progress(fraction: float, message: str) -> None:
            if cancel.is_set():
                raise RequestAborted(f"Loading {path.name} was cancelled")
            if progress is not None:
                progress(LoadProgress(fraction, message))

        try:
            if cancel.is_set():                      # cancelled while queued: keep the current model
                raise RequestAborted(f"Loading {path.name} was cancelled")
            choice = choose_backend(self._backend_setting, self._async_setting)
            # The current model stays until the new one is ready: a cancelled or failed switch keeps it.
            # Only when both do not fit at once is it freed first (then a failure leaves no model).
            try:
                built, choice = self._build(path, choice, on_progress, max_context)
            except (OutOfHostMemoryError, OutOfDeviceMemoryError):
                if self._model is None:
                    raise
                self._drop_model()
                built, choice = self._build(path, choice, on_progress, max_context)
            self._drop_model()
            self._model = built
            self.backend_reason, self.async_reason = choice.reason, choice.async_reason
            self.model_info = self._model.info
            future.set_result(self.model_info)
        except BaseException as e:   # noqa: BLE001 - every failure goes to the caller's future
            future.set_exception(e if isinstance(e, Exception) else EngineError(str(e)))

    def _build(self, path: Path, choice: BackendChoice, on_progress, max_context: int
               ) -> tuple[_Loaded, BackendChoice]:
        """The model on the chosen backend, with its core. A GPU that cannot run it falls back to the CPU."""
        from engine.core.build import build_cpu, build_gpu, gpu_forward_available

        opts = dict(max_context=max_context, max_num_seqs=self._max_num_seqs,
                    prefill_chunk=self._prefill_chunk, kv_cache_tokens=self._kv_cache_tokens,
                    kv_cache_type=self._kv_cache_type)
        if choice.name != "cpu":
            unsupported = None
            if gpu_forward_available():
                try:
                    built = build_gpu(path, choice, on_progress, **opts)
                except UnsupportedModelError as e:      # e.g. a layer kind without GPU kernels yet
                    unsupported = e
            if unsupported is not None or not gpu_forward_available():
                from engine.backend_choice import choose_backend
                why = (f"CPU fallback: {choice.name} was chosen ({choice.reason}) but "
                       + (f"it cannot run this model ({unsupported})" if unsupported else "the GPU forward pass is missing"))
                cpu = choose_backend("cpu", self._async_setting)
                choice = replace(cpu, reason=why)
                built = build_cpu(path, choice, on_progress, **opts)
        else:
            built = build_cpu(path, choice, on_progress, **opts)
        info = replace(built.info, async_scheduling=choice.async_scheduling, async_reason=choice.async_reason,
                       template_notice=built.prompt_format.template_notice, max_context=built.max_context)
        return _Loaded(info, built.prompt_format, built.vocab_size, built.core, built.max_context), choice

    def _drop_model(self) -> None:
        """Abort every request (in flight too) and free the model."""
        if self._model is not None:
            model, self._model = self._model, None
            model.core.close()
        self.model_info = None
        for request_id in list(self._handles):
            self._finish_unstarted(request_id, "abort")

    def _fail_everything(self, message: str) -> None:
        """The core itself broke: fail every request, and drop the model (it may be in a bad state)."""
        model, self._model = self._model, None
        self.model_info = None
        for generation in list(model.core.generations.values()):
            generation.finish("error", error=message)
        try:
            model.core.runner.close()
        except Exception:                     # noqa: BLE001 - already failing; the message above says why
            pass
        for request_id in list(self._handles):
            self._finish_unstarted(request_id, "error", message)

    def _finish_unstarted(self, request_id: str, reason, error: str | None = None, error_type: str = "") -> None:
        handle = self._handles.pop(request_id, None)
        if handle is not None:
            handle._put(Finished(request_id, reason, Usage(), error=error, error_type=error_type))

    def _emit(self, event: Event) -> None:
        handle = self._handles.get(event.request_id)
        if handle is None:
            return
        if isinstance(event, Finished):
            del self._handles[event.request_id]
        handle._put(event)

    def _stats(self) -> EngineStats:
        m = self._model
        if m is None:
            return EngineStats(False, len(self._handles), 0, 0, 0, 0, 0)
        sched = m.core.scheduler
        return EngineStats(True, len(self._handles), len(sched.running), len(sched.waiting), sched.kv.num_blocks,
                           sched.kv.num_free, len(m.core.in_flight), m.max_context, m.core.runner.kv_cache_bytes)

    def _accept(self, request: GenerateRequest, handle: RequestHandle) -> None:
        """Check what is cheap on the engine thread, then hand the prompt to the encoder thread."""
        if request.request_id in self._handles:
            handle._put(Finished(request.request_id, "error", Usage(), error=(
                f"Request id {request.request_id[:80]!r} is already in use by a request that has not finished.")))
            return
        self._handles[request.request_id] = handle
        m = self._model
        try:
            if m is None:
                raise ModelNotLoadedError("No model is loaded; load one before sending a request.")
            request.params.validate()
            if request.context_overflow not in OVERFLOW_POLICIES:
                raise EngineError(f"context_overflow must be one of {', '.join(OVERFLOW_POLICIES)}, "
                                  f"not {str(request.context_overflow)[:40]!r}")
            _check_prompt_size(m, request)
        except Exception as e:   # noqa: BLE001 - a bad request fails alone
            self._fail_request(request, e)
            return
        (self._raw_encoder if request.messages is None else self._chat_encoder).submit(self._encode, m, request)

    def _encode(self, m: _Loaded, request: GenerateRequest) -> None:
        """Encoder thread: template + tokenizer, then back to the engine thread as an "encoded" command."""
        try:
            result: Fitted | Exception = _encode_fitted(m, request)
        except Exception as e:   # noqa: BLE001 - handed to the engine thread, which fails this request alone
            result = e
        if not self._stopped:
            self._commands.put(("encoded", m, request, result))

    def _fail_request(self, request: GenerateRequest, error: Exception) -> None:
        message = str(error) if isinstance(error, EngineError) else f"Invalid request: {type(error).__name__}: {error}"
        kind = type(error).__name__ if isinstance(error, EngineError) else ""
        self._finish_unstarted(request.request_id, "error", message, kind)

    def _admit(self, encoded_for: _Loaded, request: GenerateRequest, result: Fitted | Exception) -> None:
        """Checks the encoded request and hands it to the core; any problem finishes it with "error"."""
        if self._handles.get(request.request_id) is None:
            return                                   # aborted (or the model dropped) while it was encoded
        m = self._model
        try:
            if m is not encoded_for:
                raise ModelNotLoadedError("The model changed while the request was prepared; send it again.")
            if isinstance(result, Exception):
                raise result
            prompt_ids = result.ids
            if not prompt_ids:
                raise EngineError("The prompt is empty.")
            if max(prompt_ids) >= m.vocab_size or min(prompt_ids) < 0:
                raise EngineError("The prompt has token ids outside the model's vocabulary.")
            tokenizer = m.prompt_format.tokenizer
            generation = Generation(request, prompt_ids, tokenizer, tokenizer.stop_ids, self._emit,
                                    reasoning_parser(m.prompt_format.template_source, tokenizer, prompt_ids),
                                    turns_left_out=result.turns_dropped,
                                    system_prompt_left_out=result.system_dropped)
            m.core.add_request(generation, prompt_ids, tokenizer.stop_ids)
        except Exception as e:   # noqa: BLE001 - a bad request fails alone
            self._fail_request(request, e)


def _encode_fitted(m: _Loaded, request: GenerateRequest) -> Fitted:
    """The prompt's ids; a chat over the context is shortened by its overflow policy (engine.context_fit),
    and the result says how many turns that left out."""
    if request.messages is None or request.context_overflow == "stop":
        return Fitted(encode_prompt(m.prompt_format, request), 0, 0)
    budget = m.max_context - reply_room(m.max_context, request.params.max_tokens)
    return fit_messages(lambda msgs: encode_prompt(m.prompt_format, replace(request, messages=tuple(msgs))),
                        request.messages, request.context_overflow, budget)


def _check_prompt_size(m: _Loaded, request: GenerateRequest) -> None:
    """Refuse, without tokenizing, a prompt that cannot fit: no token covers more than the vocabulary's
    longest entry, so ceil(bytes / longest) tokens is a lower bound on its length."""
    if request.messages is not None and request.context_overflow != "stop":
        return                                           # too long is handled by dropping turns
    if request.prompt_token_ids is not None:             # ids: their count is the length
        if len(request.prompt_token_ids) >= m.max_context:
            raise ContextOverflowError(f"The prompt is {len(request.prompt_token_ids):,} tokens, but the context "
                                       f"holds {m.max_context:,}.")
        return
    texts = [request.prompt] if request.prompt is not None else [msg["content"]
                                                                  for msg in normalize_messages(request.messages)]
    chars = sum(len(t) for t in texts if isinstance(t, str))
    longest = m.prompt_format.tokenizer.max_token_bytes
    if chars // longest < m.max_context:        # cheap first: a character is at least one byte
        return
    n_bytes = sum(len(t.encode("utf-8", "replace")) for t in texts if isinstance(t, str))
    at_least = -(-n_bytes // longest)
    if at_least >= m.max_context:
        raise ContextOverflowError(
            f"The prompt is {n_bytes:,} bytes: at least {at_least:,} tokens, but the context holds "
            f"{m.max_context:,}; shorten it or load the model with a longer context.")


__all__ = ["Engine", "EngineStats", "RequestHandle"]
