"""The server's front door, checked before any route runs (SAFETY.md, "A local server").

Order: Host header (DNS rebinding) -> Origin (browsers: only allow-listed origins, with CORS headers for
them) -> bearer key (constant-time) -> route. Body size is capped where the body is read (`read_body`).
"""
from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from engine.server import DEFAULT_PORT
from engine.server.schema import ApiError

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
DEFAULT_MAX_BODY_BYTES = 4 << 20       # a long conversation is well under this


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None            # None or "": any (or no) Authorization header is accepted
    allowed_origins: tuple[str, ...] = ()  # browser origins allowed to call (CORS), e.g. "http://localhost:3000"
    allowed_hosts: tuple[str, ...] = ()    # extra Host names, beyond loopback and the bound address
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_pending: int = 64                  # requests accepted and not finished; more answer 503

    @property
    def is_loopback(self) -> bool:
        return _is_loopback(self.host)


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(host_header: str) -> str:
    """"name:port" / "[v6]:port" -> name, lower-cased."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def host_allowed(config: ServerConfig, host_header: str | None) -> bool:
    if not host_header:
        return False
    name = _host_name(host_header)
    if name in LOOPBACK_NAMES or name == config.host.lower().strip("[]") or name in config.allowed_hosts:
        return True
    if config.is_loopback:
        return _is_loopback(name)
    try:                       # on a LAN address an IP literal cannot be a rebinding attack (no DNS involved)
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return False


def key_matches(config: ServerConfig, authorization: str | None) -> bool:
    if not config.api_key:
        return True
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode("utf-8"), config.api_key.encode("utf-8"))


def cors_headers(origin: str) -> dict[str, str]:
    return {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
            "Access-Control-Allow-Headers": "Authorization, Content-Type",
            "Access-Control-Allow-Methods": "GET, POST, OPTIONS", "Access-Control-Max-Age": "600"}


class Guard:
    """ASGI middleware in front of every route (unknown paths included)."""

    def __init__(self, app, config: ServerConfig, on_refused: Callable[[str, str, int], None] | None = None):
        self.app, self.config, self.on_refused = app, config, on_refused

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        try:
            self._check(headers, origin)
        except ApiError as e:
            if self.on_refused is not None:
                self.on_refused(scope["method"], scope["path"], e.status)
            await JSONResponse(e.body(), e.status)(scope, receive, send)
            return
        extra = cors_headers(origin) if origin else {}
        if origin and scope["method"] == "OPTIONS":          # CORS preflight of an allowed origin
            await Response(status_code=204, headers=extra)(scope, receive, send)
            return
        if not extra:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": list(message.get("headers", []))
                           + [(k.lower().encode(), v.encode()) for k, v in extra.items()]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def _check(self, headers: Headers, origin: str | None) -> None:
        if not host_allowed(self.config, headers.get("host")):
            raise ApiError("The Host header does not name this server (a DNS-rebinding guard): use "
                           "localhost or the address the server is bound to.", 403, code="host_not_allowed")
        if origin is not None and origin not in self.config.allowed_origins:
            raise ApiError("Requests from this browser origin are not allowed; add it to the server's "
                           "allowed origins.", 403, code="origin_not_allowed")
        if not key_matches(self.config, headers.get("authorization")):
            raise ApiError("Missing or wrong API key: send 'Authorization: Bearer <key>'.", 401,
                           code="invalid_api_key", kind="authentication_error")


async def read_body(request: Request, limit: int) -> bytes:
    """The body, or 413 as soon as it is known to exceed `limit` (from Content-Length, else while reading)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ApiError(f"The request body is {int(declared):,} bytes; the limit is {limit:,}.", 413,
                       code="body_too_large")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(f"The request body is over the limit of {limit:,} bytes.", 413, code="body_too_large")
        chunks.append(chunk)
    return b"".join(chunks)

