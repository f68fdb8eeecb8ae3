"""Talking to a remote OpenAI-compatible server (vLLM, llama-server, LM Studio, our own `engine serve`) over
httpx. No Qt here: these functions block and run on worker threads (app/remote_models.py).

Every failure becomes a `RemoteError` whose message says, in words, what went wrong and what to do
(unreachable, refused key, unknown model, no answer in time, a broken stream); never a traceback.
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpx

from engine.api import Finished, GenerateRequest, Usage

CONNECT_TIMEOUT_S = 5.0
LIST_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 120.0          # between two chunks of a reply (a big model's first token can take a while)
MESSAGE_LIMIT = 300             # characters of a server's own error message quoted back


class RemoteError(Exception):
    """A failure explained in words (the message is shown to the user as it is)."""


@dataclass(frozen=True)
class RemoteServer:
    base_url: str                 # normalized: scheme://host[:port][/path]/v1, no trailing slash
    api_key: str = ""

    @property
    def label(self) -> str:
        """host:port, how the status bar and the lists name the server."""
        return urlsplit(self.base_url).netloc

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}


def normalize_base_url(text: str) -> str:
    """'host:8000', 'http://host:8000/', 'http://host:8000/v1' -> 'http://host:8000/v1'. Raises RemoteError."""
    url = text.strip().rstrip("/")
    if not url:
        raise RemoteError("Type the server's address, for example http://192.168.1.20:8000/v1.")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteError(f"{text.strip()!r} is not a web address; it should look like http://host:port/v1.")
    try:
        parts.port                                   # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise RemoteError(f"The port in {text.strip()!r} is not a number.") from None
    return url if parts.path.endswith("/v1") else url + "/v1"


def _server_message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:MESSAGE_LIMIT].strip()
    err = body.get("error") if isinstance(body, dict) else None
    message = err.get("message") if isinstance(err, dict) else err if isinstance(err, str) else None
    if message is None and isinstance(body, dict):
        message = body.get("detail") or body.get("message")
    return str(message or "")[:MESSAGE_LIMIT]


def explain_status(server: RemoteServer, response: httpx.Response, model: str | None = None) -> RemoteError:
    said = _server_message(response)
    said = f' The server said: "{said}"' if said else ""
    code = response.status_code
    if code in (401, 403):
        hint = "Check the API key for this server (remove it and add the server again with the right key)."
        return RemoteError(f"{server.label} refused the request (HTTP {code}): the API key is missing or "
                           f"wrong. {hint}{said}")
    if code == 404 and model is not None:
        return RemoteError(f"{server.label} has no model named {model!r} (HTTP 404). It may have been "
                           f"unloaded or renamed: pick one of its models again in the model library.{said}")
    if code == 404:
        return RemoteError(f"{server.base_url} has no OpenAI API (HTTP 404 for /models). Check the address: "
                           f"it usually ends in /v1.{said}")
    if code == 503:
        return RemoteError(f"{server.label} is busy or has no model loaded (HTTP 503); try again shortly.{said}")
    return RemoteError(f"{server.label} answered HTTP {code}.{said}")


def explain_transport(server: RemoteServer, error: httpx.HTTPError, read_timeout: float) -> RemoteError:
    if isinstance(error, httpx.ConnectTimeout):
        return RemoteError(f"Cannot reach {server.label}: no answer to the connection within "
                           f"{CONNECT_TIMEOUT_S:.0f} s. Check the address and that the server is running.")
    if isinstance(error, httpx.TimeoutException):
        return RemoteError(f"{server.label} did not answer within {read_timeout:.0f} s. The server may be "
                           "overloaded or stuck; the text so far is kept.")
    if isinstance(error, httpx.ConnectError):
        return RemoteError(f"Cannot reach {server.label}: nothing answered at {server.base_url}. Check the "
                           "address and that the server is running.")
    if isinstance(error, httpx.RemoteProtocolError):
        return RemoteError(f"The connection to {server.label} broke off; the text so far is kept.")
    return RemoteError(f"Talking to {server.label} failed: {type(error).__name__}: {error}")


def _timeout(read: float) -> httpx.Timeout:
    return httpx.Timeout(connect=CONNECT_TIMEOUT_S, read=read, write=30.0, pool=CONNECT_TIMEOUT_S)


def list_models(server: RemoteServer, timeout: float = LIST_TIMEOUT_S) -> list[dict]:
    """The server's /models entries (dicts with at least "id"). Blocks; raises RemoteError."""
    try:
        r = httpx.get(server.base_url + "/models", headers=server.headers(), timeout=_timeout(timeout))
    except httpx.HTTPError as e:
        raise explain_transport(server, e, timeout) from None
    if r.status_code != 200:
        raise explain_status(server, r)
    try:
        data = r.json()["data"]
        models = [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
    except (ValueError, KeyError, TypeError):
        raise RemoteError(f"{server.label} answered /models with something that is not an OpenAI model "
                          "list. Is this an OpenAI-compatible server?") from None
    return models


def chat_body(model: str, request: GenerateRequest) -> dict:
    """The OpenAI chat request for an engine request (the same sampling the local engine would use)."""
    p = request.params
    messages = [{"role": m.role, "content": m.content} for m in request.messages or ()]
    if request.prompt is not None:
        messages.append({"role": "user", "content": request.prompt})
    body = {"model": model, "messages": messages, "stream": True, "stream_options": {"include_usage": True},
            "max_tokens": p.max_tokens, "temperature": p.temperature, "top_p": p.top_p}
    if p.top_k:
        body["top_k"] = p.top_k
    if p.min_p:
        body["min_p"] = p.min_p
    if p.repetition_penalty != 1.0:
        body["repetition_penalty"] = p.repetition_penalty
    if p.seed is not None:
        body["seed"] = p.seed
    if p.stop:
        body["stop"] = list(p.stop)
    return body


def stream_chat(server: RemoteServer, model: str, request: GenerateRequest, on_text: Callable[[str], None],
                stopped: Callable[[], bool], read_timeout: float = READ_TIMEOUT_S) -> Finished:
    """Streams one reply: `on_text(piece)` per content delta (worker thread); `stopped()` is asked after
    every chunk, and True closes the stream (the server sees the client go). Returns the Finished event
    (reason "stop", "length", "abort" or "error" with the words in `error`); never raises."""
    rid, t0 = request.request_id, time.monotonic()
    first, tokens, prompt_tokens, reason = None, 0, 0, "stop"
    try:
        with httpx.Client(timeout=_timeout(read_timeout), headers=server.headers()) as client, \
                client.stream("POST", server.base_url + "/chat/completions", json=chat_body(model, request)) as r:
            if r.status_code != 200:
                r.read()
                raise explain_status(server, r, model)
            for line in r.iter_lines():
                if stopped():
                    reason = "abort"
                    break
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = _parse_chunk(server, data)
                if chunk.get("usage"):
                    tokens = int(chunk["usage"].get("completion_tokens") or tokens)
                    prompt_tokens = int(chunk["usage"].get("prompt_tokens") or 0)
                for choice in chunk.get("choices") or ():
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        first = first or time.monotonic()
                        on_text(text)
                    if choice.get("finish_reason") == "length":
                        reason = "length"
    except RemoteError as e:
        return Finished(rid, "error", Usage(), error=str(e))
    except httpx.HTTPError as e:
        return Finished(rid, "error", Usage(), error=str(explain_transport(server, e, read_timeout)))
    end = time.monotonic()
    decode = (tokens - 1) / (end - first) if first and tokens > 1 and end > first else 0.0
    usage = Usage(prompt_tokens=prompt_tokens, generated_tokens=tokens,
                  time_to_first_token_s=(first - t0) if first else 0.0, decode_tokens_per_s=decode,
                  total_time_s=end - t0)
    return Finished(rid, reason, usage)


def _parse_chunk(server: RemoteServer, data: str) -> dict:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise RemoteError(f"{server.label} sent a reply that is not OpenAI-style JSON.") from None
    if not isinstance(chunk, dict):
        raise RemoteError(f"{server.label} sent a reply that is not OpenAI-style JSON.")
    if "error" in chunk:
        err = chunk["error"]
        message = err.get("message") if isinstance(err, dict) else str(err)
        raise RemoteError(f"{server.label} stopped the reply with an error: {str(message)[:MESSAGE_LIMIT]}")
    return chunk
