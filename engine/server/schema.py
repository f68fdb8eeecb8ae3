"""OpenAI request bodies -> engine requests, and engine results -> OpenAI response bodies.

Validation contract: every problem with a body raises `ApiError` (status 400 unless said otherwise) whose
message names the field; the sampling ranges are the engine's own (`SamplingParams.validate`), never
repeated here. Fields we do not support yet are refused by name rather than silently ignored.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.api import REASONING_EFFORTS, GenerateRequest, SamplingParams
from engine.errors import InvalidRequestError

MAX_MESSAGES = 4096
CHAT_ROLES = ("system", "user", "assistant", "tool", "developer")

# What OpenAI sends by default when a field is left out (top_k/min_p are off unless asked for).
DEFAULT_TEMPERATURE = 1.0
DEFAULT_TOP_P = 1.0


class ApiError(Exception):
    """An error answered as {"error": {"message", "type", "param", "code"}}."""

    def __init__(self, message: str, status: int = 400, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.status, self.param, self.code, self.kind = message, status, param, code, kind

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except RecursionError:
        raise ApiError("The request body is nested too deeply.") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise ApiError(f"The request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise ApiError("The request body must be a JSON object.")
    return body


@dataclass(frozen=True)
class ParsedRequest:
    request: GenerateRequest
    model: str | None
    stream: bool
    include_usage: bool
    has_tools: bool


def _get(body: Mapping, name: str, types: tuple, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in types:
        raise ApiError(f"'{name}' must be {' or '.join(t.__name__ for t in types)}, not a boolean.", param=name)
    if not isinstance(value, types):
        raise ApiError(f"'{name}' must be {' or '.join(t.__name__ for t in types)}, not {type(value).__name__}.",
                       param=name)
    return value


def _refuse_unsupported(body: Mapping) -> None:
    n = _get(body, "n", (int,), 1)
    if n != 1:
        raise ApiError("'n' must be 1: one choice per request is supported.", param="n")
    for name in ("presence_penalty", "frequency_penalty"):
        value = _get(body, name, (int, float), 0)
        if not math.isfinite(value):
            raise ApiError(f"'{name}' must be a finite number.", param=name)
        if value != 0:
            raise ApiError(f"'{name}' is not supported by this server (only 0); use 'repetition_penalty' "
                           "(1.0 is off, 1.1 is a mild penalty) instead.", param=name)
    fmt = body.get("response_format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, Mapping) else None
        if kind != "text":
            raise ApiError("'response_format' other than {\"type\": \"text\"} (JSON mode, JSON schema) is not "
                           "supported by this server yet.", param="response_format")
    if body.get("logprobs") not in (None, False) or body.get("top_logprobs") not in (None, 0):
        raise ApiError("'logprobs' is not supported by this server.", param="logprobs")
    if body.get("best_of") not in (None, 1):
        raise ApiError("'best_of' is not supported by this server.", param="best_of")
    for name in ("suffix", "echo", "logit_bias"):
        if body.get(name):
            raise ApiError(f"'{name}' is not supported by this server.", param=name)


def _sampling(body: Mapping, max_context: int) -> SamplingParams:
    max_tokens = _get(body, "max_completion_tokens", (int,), None)
    if max_tokens is None:
        max_tokens = _get(body, "max_tokens", (int,), max_context)
    if max_tokens < 1:
        raise ApiError(f"'max_tokens' is {max_tokens}; it must be at least 1.", param="max_tokens")
    stop = body.get("stop")
    if stop is None:
        stop = ()
    elif isinstance(stop, str):
        stop = (stop,)
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stop = tuple(stop)
    else:
        raise ApiError("'stop' must be a string or a list of strings.", param="stop")
    params = SamplingParams(
        temperature=_get(body, "temperature", (int, float), DEFAULT_TEMPERATURE),
        top_p=_get(body, "top_p", (int, float), DEFAULT_TOP_P),
        top_k=_get(body, "top_k", (int,), 0),
        min_p=_get(body, "min_p", (int, float), 0.0),
        repetition_penalty=_get(body, "repetition_penalty", (int, float), 1.0),
        max_tokens=min(max_tokens, max_context),     # clamped: the context bounds any reply anyway
        seed=_get(body, "seed", (int,), None),
        stop=stop,
    )
    try:
        return params.validate()
    except InvalidRequestError as e:
        raise ApiError(f"Invalid sampling value: {e}.", param=e.field) from None


def _content_text(content: Any, where: str) -> str:
    """Message content: a string, or a list of {"type": "text", "text": ...} parts (joined)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str)):
                raise ApiError(f"{where}: only text content parts are supported (no images or audio).",
                               param="messages")
            parts.append(part["text"])
        return "".join(parts)
    raise ApiError(f"{where}: 'content' must be a string or a list of text parts.", param="messages")


def _message(m: Any, i: int) -> dict:
    where = f"messages[{i}]"
    if not isinstance(m, Mapping):
        raise ApiError(f"{where} must be an object with 'role' and 'content'.", param="messages")
    role = m.get("role")
    if role not in CHAT_ROLES:
        shown = role[:40] if isinstance(role, str) else type(role).__name__
        raise ApiError(f"{where}: role {shown!r} is not one of {', '.join(CHAT_ROLES)}.", param="messages")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role,
                           "content": _content_text(m.get("content"), where)}
    calls = m.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise ApiError(f"{where}: 'tool_calls' must be a list.", param="messages")
        out["tool_calls"] = [_tool_call_for_template(c, where) for c in calls]
    for name in ("name", "tool_call_id"):
        if isinstance(m.get(name), str):
            out[name] = m[name]
    return out


def _tool_call_for_template(call: Any, where: str) -> dict:
    """OpenAI's tool call ({"function": {"name", "arguments": JSON text}}) as templates read it (arguments
    as an object, the way Hugging Face templates expect)."""
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ApiError(f"{where}: each tool call needs a function with a name.", param="messages")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            raise ApiError(f"{where}: a tool call's 'arguments' is not valid JSON.", param="messages") from None
    return {"type": "function", "id": call.get("id"), "function": {"name": fn["name"], "arguments": args}}


# tool_choice values this server honours: it never forces a call (no constrained decoding), so "required" and a named
# function are refused rather than silently taken as "auto"
TOOL_CHOICES = ("auto", "none")


def _tools(body: Mapping) -> tuple | None:
    choice = body.get("tool_choice")
    if choice is not None and choice not in TOOL_CHOICES:
        named = choice == "required" or isinstance(choice, Mapping)
        raise ApiError("'tool_choice' " + ("\"required\" or a named function is not supported: this server does not "
                                           "force a call; use \"auto\"." if named else
                                           f"must be one of {', '.join(TOOL_CHOICES)}."), param="tool_choice")
    tools = body.get("tools")
    if tools is None or choice == "none":
        return None
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
                                              and isinstance(t["function"].get("name"), str) for t in tools):
        raise ApiError("'tools' must be a list of {\"type\": \"function\", \"function\": {\"name\": ...}}.",
                       param="tools")
    return tuple(tools) if tools else None


def _common(body: Mapping) -> tuple[str | None, bool, bool]:
    model = _get(body, "model", (str,), None)
    stream = _get(body, "stream", (bool,), False)
    options = _get(body, "stream_options", (dict,), {})
    return model, stream, bool(options.get("include_usage")) and stream


def parse_chat(body: Mapping, max_context: int, request_id: str) -> ParsedRequest:
    _refuse_unsupported(body)
    model, stream, include_usage = _common(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("'messages' must be a non-empty list.", param="messages")
    if len(messages) > MAX_MESSAGES:
        raise ApiError(f"'messages' has {len(messages)} entries; at most {MAX_MESSAGES}.", param="messages")
    parsed = tuple(_message(m, i) for i, m in enumerate(messages))
    thinking = _get(body, "enable_thinking", (bool,), None)
    effort = _get(body, "reasoning_effort", (str,), None)
    if effort is not None and effort not in REASONING_EFFORTS:
        raise ApiError(f"'reasoning_effort' must be one of {', '.join(REASONING_EFFORTS)}.",
                       param="reasoning_effort")
    tools = _tools(body)
    request = GenerateRequest(messages=parsed, params=_sampling(body, max_context), request_id=request_id,
                              enable_thinking=thinking, reasoning_effort=effort, tools=tools)
    return ParsedRequest(request, model, stream, include_usage, tools is not None)


def parse_completion(body: Mapping, max_context: int, request_id: str) -> ParsedRequest:
    _refuse_unsupported(body)
    model, stream, include_usage = _common(body)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if not isinstance(prompt, str):
        raise ApiError("'prompt' must be a string (one prompt per request).", param="prompt")
    if not prompt:
        raise ApiError("'prompt' is empty.", param="prompt")
    request = GenerateRequest(prompt=prompt, params=_sampling(body, max_context), request_id=request_id)
    return ParsedRequest(request, model, stream, include_usage, False)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage_body(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def now() -> int:
    return int(time.time())
