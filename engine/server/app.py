"""The OpenAI-compatible HTTP API over one Engine (starlette; served by uvicorn, see engine.server.run).

Threads: the event loop here never blocks on the engine. Each request submits with a sink that hands the
engine thread's events to the loop (`call_soon_threadsafe`), so there is no thread per request. Requests
from this server share the Engine - and its continuous batching - with whoever else uses it (the app).

Life of a request: guard (Host, Origin, key) -> body (capped) -> schema (400s) -> pending count (503 when
full) -> submit -> first event (an error before any token is a 400) -> JSON or SSE -> Finished. A client
that goes away aborts its request, which frees its KV blocks.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from engine.api import Finished, TextDelta
from engine.server.guard import Guard, ServerConfig, read_body
from engine.server.schema import (
    ApiError,
    ParsedRequest,
    new_id,
    now,
    parse_chat,
    parse_completion,
    parse_json,
    usage_body,
)
from engine.server.tool_calls import parse_tool_calls, template_has_tool_calls, template_takes_tools

log = logging.getLogger("engine.server")
DISCONNECT_POLL_S = 0.25


def clean(text: object, limit: int = 120) -> str:
    """Client text for a log line: control characters escaped (no forged lines), length bounded."""
    s = str(text)
    return s[:limit].encode("unicode_escape").decode("ascii") + ("..." if len(s) > limit else "")


class EngineEvents:
    """One request's events on the event loop: the engine thread puts them, the handler awaits them."""

    def __init__(self, engine, parsed: ParsedRequest):
        loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue = asyncio.Queue()

        def sink(event) -> None:
            try:
                loop.call_soon_threadsafe(self.queue.put_nowait, event)
            except RuntimeError:          # the loop is closed: the server is gone, nobody is listening
                pass

        self.handle = engine.submit(parsed.request, sink=sink)
        self.done = False
        self._check_at = loop.time() + DISCONNECT_POLL_S     # when the client is next asked whether it is there

    async def next(self, request: Request | None = None):
        """The next event; with `request`, a client that disconnects meanwhile aborts the request. The client is
        asked every DISCONNECT_POLL_S whether events arrive or not: a reply whose tokens come faster than that
        (a non-streaming one never writes, so nothing else notices) must not run on to max_tokens for nobody."""
        loop = asyncio.get_running_loop()
        while True:
            if request is not None and loop.time() >= self._check_at:
                self._check_at = loop.time() + DISCONNECT_POLL_S
                if await request.is_disconnected():
                    self.abort()
                    raise ClientGone
            wait = max(0.0, self._check_at - loop.time()) if request is not None else None
            try:
                event = await asyncio.wait_for(self.queue.get(), wait)
            except TimeoutError:
                continue
            self.done = isinstance(event, Finished)
            return event

    def abort(self) -> None:
        if not self.done:
            self.handle.abort()
            self.done = True


class ClientGone(Exception):
    pass


class EndingStream(StreamingResponse):
    """A StreamingResponse that calls `on_end()` once however the response ends. Starlette cancels a response
    whose client left before its body iterator ever started, and a generator that never started never runs its
    own `finally`: the request would run on to max_tokens and hold its `pending` place."""

    def __init__(self, content, on_end: Callable[[], None], **kwargs):
        super().__init__(content, **kwargs)
        self._on_end = on_end

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_end()


class ModelServer:
    """`engine`: a started Engine (its loaded model is what is served; none loaded answers 503).
    `on_log(line)`: one line per request and per refusal (the app's live request log)."""

    def __init__(self, engine, config: ServerConfig, on_log: Callable[[str], None] | None = None):
        self.engine, self.config, self.on_log = engine, config, on_log
        self.pending = 0                  # touched on the event loop only
        routes = [Route("/v1/models", self.models, methods=["GET"]),
                  Route("/v1/chat/completions", self.chat, methods=["POST"]),
                  Route("/v1/completions", self.completions, methods=["POST"]),
                  Route("/health", self.health, methods=["GET"])]
        app = Starlette(routes=routes, exception_handlers={HTTPException: self._http_error, ApiError: self._api_error,
                                                           Exception: self._crash})
        self.asgi = Guard(app, config, on_refused=lambda m, p, s: self._log(f"{m} {clean(p)} -> {s} refused"))

    # ---- helpers ----------------------------------------------------------------------------------
    def _log(self, line: str) -> None:
        log.info(line)
        if self.on_log is not None:
            try:
                self.on_log(line)
            except Exception:   # noqa: BLE001 - a broken log view must not break serving
                pass

    def model_id(self) -> str | None:
        info = self.engine.model_info
        return Path(info.path).stem if info is not None else None

    def template_source(self) -> str | None:
        return self.engine.chat_template_source

    async def _http_error(self, request: Request, exc: HTTPException):
        message = ("Unknown endpoint: " + clean(request.url.path, 80) + " (this server has /v1/models, "
                   "/v1/chat/completions and /v1/completions)") if exc.status_code == 404 else str(exc.detail)
        self._log(f"{request.method} {clean(request.url.path)} -> {exc.status_code}")
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return JSONResponse(ApiError(message, exc.status_code, kind=kind).body(), exc.status_code)

    async def _api_error(self, request: Request, exc: ApiError):
        self._log(f"{request.method} {clean(request.url.path)} -> {exc.status} {clean(exc.message, 200)}")
        return JSONResponse(exc.body(), exc.status)

    async def _crash(self, request: Request, exc: Exception):
        log.exception("request failed")
        err = ApiError(f"Internal server error: {type(exc).__name__}", 500, kind="server_error")
        return JSONResponse(err.body(), 500)

    def _check_model(self, asked: str | None) -> str:
        served = self.model_id()
        if served is None:
            raise ApiError("No model is loaded on this server.", 503, code="model_not_loaded", kind="server_error")
        if asked is not None and asked != served:
            raise ApiError(f"The model {clean(asked, 80)!r} does not exist on this server; it serves "
                           f"{served!r}.", 404, param="model", code="model_not_found")
        return served

    # ---- routes -----------------------------------------------------------------------------------
    async def health(self, request: Request):
        """Liveness plus the engine's counts (KV blocks free, live requests): read-only, for monitoring."""
        stats = await asyncio.to_thread(self.engine.stats)
        return JSONResponse({"status": "ok", "model": self.model_id(), "pending": self.pending,
                             "live_requests": stats.live_requests, "kv_blocks_total": stats.kv_blocks_total,
                             "kv_blocks_free": stats.kv_blocks_free})

    async def models(self, request: Request):
        served = self.model_id()
        data = [] if served is None else [{"id": served, "object": "model", "created": now(),
                                            "owned_by": "halo-chat"}]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request):
        body = parse_json(await read_body(request, self.config.max_body_bytes))
        parsed = parse_chat(body, self.engine.max_context, new_id("chatcmpl"))
        return await self._serve(request, parsed, chat=True)

    async def completions(self, request: Request):
        body = parse_json(await read_body(request, self.config.max_body_bytes))
        parsed = parse_completion(body, self.engine.max_context, new_id("cmpl"))
        return await self._serve(request, parsed, chat=False)

    async def _serve(self, request: Request, parsed: ParsedRequest, chat: bool):
        model = self._check_model(parsed.model)
        if parsed.has_tools and not template_takes_tools(self.template_source()):
            raise ApiError("This model's chat template does not read 'tools', so the model would never see them; "
                           "send the request without 'tools', or load a model whose template supports tool calls.",
                           param="tools")
        if self.pending >= self.config.max_pending:
            raise ApiError(f"The server is busy ({self.pending} requests in progress); retry shortly.", 503,
                           code="server_busy", kind="server_error")
        self.pending += 1
        started = time.monotonic()
        events = EngineEvents(self.engine, parsed)
        try:
            first = await events.next(request)
        except ClientGone:
            self.pending -= 1
            self._log(f"{request.method} {request.url.path} model={clean(model)} -> client gone")
            return JSONResponse({}, 499)
        if isinstance(first, Finished) and first.reason == "error":
            self.pending -= 1
            raise ApiError(first.error or "The request failed.", 400)
        tools = parsed.has_tools and template_has_tool_calls(self.template_source())
        reply = Reply(parsed, model, chat, tools)
        if parsed.stream:
            def end_stream() -> None:
                if not events.done:
                    self._log(f"{request.method} {request.url.path} model={clean(model)} -> client gone, aborted")
                events.abort()
                self.pending -= 1
            return EndingStream(self._stream(request, events, first, reply, started), end_stream,
                                media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
        try:
            event = first
            while True:
                reply.add(event)
                if isinstance(event, Finished):
                    break
                event = await events.next(request)
        except ClientGone:
            self._log(f"{request.method} {request.url.path} model={clean(model)} -> client gone, aborted")
            return JSONResponse({}, 499)
        finally:
            events.abort()
            self.pending -= 1
        self._log_done(request, model, reply, started)
        if reply.finished.reason == "error":
            raise ApiError(reply.finished.error or "Generation failed.", 500, kind="server_error")
        return JSONResponse(reply.body())

    async def _stream(self, request, events: EngineEvents, first, reply: Reply, started: float) -> AsyncIterator[str]:
        """SSE frames. Cancelled (client gone) at any await, or before the first: EndingStream's `on_end` aborts
        the request then."""
        yield reply.sse(reply.opening())
        event = first
        while True:
            reply.add(event)
            for chunk in reply.chunks_for(event):
                yield reply.sse(chunk)
            if isinstance(event, Finished):
                break
            event = await events.next()
        yield "data: [DONE]\n\n"
        self._log_done(request, reply.model, reply, started)

    def _log_done(self, request: Request, model: str, reply: Reply, started: float) -> None:
        f = reply.finished
        self._log(f"{request.method} {request.url.path} model={clean(model)} -> {f.reason}, "
                  f"{f.usage.prompt_tokens} prompt + {f.usage.generated_tokens} tokens, "
                  f"{time.monotonic() - started:.2f} s")


class Reply:
    """Accumulates one request's events and writes the OpenAI bodies (whole or as chunks)."""

    def __init__(self, parsed: ParsedRequest, model: str, chat: bool, parse_tools: bool):
        self.id = parsed.request.request_id
        self.model, self.chat, self.parse_tools = model, chat, parse_tools
        self.include_usage = parsed.include_usage
        self.tools = parsed.request.tools        # the tool schemas, for typed arguments of parsed calls
        self.created = now()
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.finished: Finished | None = None

    def add(self, event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
            self.reasoning.append(event.reasoning)
        elif isinstance(event, Finished):
            self.finished = event

    def _finish_reason(self, tool_calls: list) -> str:
        if tool_calls:
            return "tool_calls"
        return "length" if self.finished.reason == "length" else "stop"

    def _usage(self) -> dict:
        u = self.finished.usage
        return usage_body(u.prompt_tokens, u.generated_tokens)

    def body(self) -> dict:
        text, tool_calls = "".join(self.text), []
        if self.parse_tools:
            text, tool_calls = parse_tool_calls(text, self.tools)
        base = {"id": self.id, "created": self.created, "model": self.model, "usage": self._usage()}
        reason = self._finish_reason(tool_calls)
        if not self.chat:
            return {**base, "object": "text_completion",
                    "choices": [{"index": 0, "text": text, "finish_reason": reason, "logprobs": None}]}
        message: dict = {"role": "assistant", "content": text if text or not tool_calls else None}
        reasoning = "".join(self.reasoning)
        if reasoning:
            message["reasoning_content"] = reasoning
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {**base, "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": reason, "logprobs": None}]}

    # ---- streaming --------------------------------------------------------------------------------
    @staticmethod
    def sse(chunk: dict) -> str:
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    def _chunk(self, delta: dict | None = None, text: str | None = None, reason: str | None = None) -> dict:
        base = {"id": self.id, "created": self.created, "model": self.model}
        if self.chat:
            return {**base, "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta or {}, "finish_reason": reason, "logprobs": None}]}
        return {**base, "object": "text_completion",
                "choices": [{"index": 0, "text": text or "", "finish_reason": reason, "logprobs": None}]}

    def opening(self) -> dict:
        return self._chunk(delta={"role": "assistant", "content": ""}, text="")

    def chunks_for(self, event) -> list[dict]:
        if isinstance(event, TextDelta):
            out = []
            if event.reasoning and self.chat:
                out.append(self._chunk(delta={"reasoning_content": event.reasoning}))
            if event.text and not self.parse_tools:     # with tools the answer is parsed once it is whole
                out.append(self._chunk(delta={"content": event.text}, text=event.text))
            return out
        if not isinstance(event, Finished):
            return []
        if event.reason == "error":
            return [{"error": ApiError(event.error or "Generation failed.", 500, kind="server_error").body()["error"]}]
        out, tool_calls = [], []
        if self.parse_tools:
            text, tool_calls = parse_tool_calls("".join(self.text), self.tools)
            if text:
                out.append(self._chunk(delta={"content": text}, text=text))
            if tool_calls:
                out.append(self._chunk(delta={"tool_calls": [{**c, "index": i} for i, c in enumerate(tool_calls)]}))
        out.append(self._chunk(reason=self._finish_reason(tool_calls)))
        if self.include_usage:
            out.append({"id": self.id, "created": self.created, "model": self.model, "choices": [],
                        "object": "chat.completion.chunk" if self.chat else "text_completion",
                        "usage": self._usage()})
        return out
