"""A real HTTP server on loopback that speaks the subset of the Hugging Face Hub API that engine.hub uses:

    GET  /api/models?search=&filter=gguf&limit=       search (JSON list)
    GET  /api/models/{repo}[/revision/{rev}]?blobs=1  model info with siblings, sizes and LFS sha256
    GET  /{repo}/resolve/{rev}/{file}                 302 redirect to /cdn/... (as the hub does)
    GET  /cdn/{repo}/{file}                           the bytes; Range requests answered 206

A hosted file is a real file or bytes; `size` may declare it longer than its bytes (the rest reads as
zeros), so a header-only GGUF of a huge model can be served. `throttle_bps` slows file bytes down so a
test can interrupt a download mid-file; `ranges` records every Range header received.

A hostile or failing hub, for the tests of what the client survives: `extra_bytes` sends that many bytes past
the file's end without a Content-Length (-1: an endless body); `stall_after` stops sending after that many body
bytes of each answer and holds the connection open until the hub closes; `answers` replaces the answer to a path with a
canned (status, headers, body): malformed JSON, an HTML error page, a 429 with Retry-After.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

REVISION = "0123456789abcdef0123456789abcdef01234567"
TOKEN = "hf_test_token"


@dataclass
class Hosted:
    source: Path | bytes
    size: int
    sha256: str

    def read(self, start: int, end: int) -> bytes:
        """Bytes [start, end) — zeros past the real content."""
        if isinstance(self.source, bytes):
            real = self.source[start:end]
        else:
            with open(self.source, "rb") as f:
                f.seek(start)
                real = f.read(max(0, end - start))
        return real + bytes(end - start - len(real))


def _sha256_of(source: Path | bytes) -> str:
    if isinstance(source, bytes):
        return hashlib.sha256(source).hexdigest()
    h = hashlib.sha256()
    with open(source, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


class FakeHub:
    def __init__(self, port: int = 0):
        self.port = port
        self.repos: dict[str, dict[str, Hosted]] = {}
        self.gated: set[str] = set()
        self.throttle_bps: float | None = None
        self.ranges: list[str] = []
        self.paths: list[str] = []         # the path of every request, in order
        self.ignore_range = False          # answer 200 with the whole file, as a server without Range does
        self.extra_bytes = 0               # bytes past the file's end, no Content-Length; -1: endless
        self.stall_after: int | None = None     # body bytes sent before the server falls silent
        self.answers: dict[str, tuple[int, dict[str, str], bytes]] = {}
        self.closing = threading.Event()   # set on exit: stalled answers end
        self._server: ThreadingHTTPServer | None = None

    def add(self, repo: str, filename: str, source: Path | bytes, size: int | None = None,
            sha256: str | None = None) -> Hosted:
        real = source.stat().st_size if isinstance(source, Path) else len(source)
        hosted = Hosted(source, size or real, sha256 or _sha256_of(source))
        self.repos.setdefault(repo, {})[filename] = hosted
        return hosted

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.closing.set()
        self._server.shutdown()
        self._server.server_close()


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")
_INFO = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")
_CDN = re.compile(r"^/cdn/(?P<repo>[^/]+/[^/]+)/(?P<file>.+)$")


class _Handler(BaseHTTPRequestHandler):
    fake: FakeHub

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:
        self._route(head=True)

    def do_GET(self) -> None:
        self._route(head=False)

    def _route(self, head: bool) -> None:
        url = urlparse(self.path)
        path = unquote(url.path)
        self.fake.paths.append(path)
        try:
            if path in self.fake.answers:
                return self._canned(*self.fake.answers[path], head)
            if path == "/api/models":
                return self._json(self._search(parse_qs(url.query)), head)
            if m := _INFO.match(path):
                return self._info(m["repo"], head)
            if m := _RESOLVE.match(path):
                return self._redirect(m["repo"], m["file"])
            if m := _CDN.match(path):
                return self._bytes(m["repo"], m["file"], head)
            self._error(404, "not found")
        except (BrokenPipeError, ConnectionResetError):
            pass                           # the client went away (a killed download): nothing to answer

    def _authorized(self, repo: str) -> bool:
        return repo not in self.fake.gated or self.headers.get("Authorization") == f"Bearer {TOKEN}"

    def _search(self, query: dict) -> list:
        words = (query.get("search") or [""])[0].lower().split()
        limit = int((query.get("limit") or ["1000"])[0])
        found = [repo for repo in sorted(self.fake.repos) if all(w in repo.lower() for w in words)]
        return [{"id": repo, "modelId": repo, "downloads": 1000 - i, "likes": 5, "tags": ["gguf"],
                 "gated": repo in self.fake.gated, "private": False} for i, repo in enumerate(found[:limit])]

    def _info(self, repo: str, head: bool) -> None:
        if repo not in self.fake.repos:
            return self._error(404, "Repository not found", code="RepoNotFound")
        if not self._authorized(repo):
            return self._error(401, "gated", code="GatedRepo")
        siblings = [{"rfilename": name, "size": f.size, "blobId": f.sha256[:40],
                     "lfs": {"sha256": f.sha256, "size": f.size, "pointerSize": 134}}
                    for name, f in self.fake.repos[repo].items()]
        self._json({"id": repo, "modelId": repo, "sha": REVISION, "siblings": siblings, "tags": ["gguf"],
                    "private": False, "gated": repo in self.fake.gated, "downloads": 1, "likes": 1}, head)

    def _redirect(self, repo: str, file: str) -> None:
        if repo not in self.fake.repos or file not in self.fake.repos[repo]:
            return self._error(404, "Entry not found", code="EntryNotFound")
        if not self._authorized(repo):
            return self._error(401, "gated", code="GatedRepo")
        self.send_response(302)
        self.send_header("Location", f"/cdn/{repo}/{quote(file)}")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _bytes(self, repo: str, file: str, head: bool) -> None:
        hosted = self.fake.repos.get(repo, {}).get(file)
        if hosted is None:
            return self._error(404, "not found")
        start, end = 0, hosted.size
        rng = self.headers.get("Range")
        if rng and not self.fake.ignore_range:
            self.fake.ranges.append(rng)
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
            start = int(m[1])
            end = min(hosted.size, int(m[2]) + 1) if m[2] else hosted.size
            if start >= hosted.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{hosted.size}")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{hosted.size}")
        else:
            self.send_response(200)
        if self.fake.extra_bytes:
            self.send_header("Connection", "close")       # the body ends when the connection does
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(end - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if head:
            return
        pos, step = start, 64 << 10
        while pos < end:
            n = min(step, end - pos)
            if self.fake.stall_after is not None and pos - start + n > self.fake.stall_after:
                self.wfile.write(hosted.read(pos, start + self.fake.stall_after))
                self.wfile.flush()
                self.fake.closing.wait()
                return
            self.wfile.write(hosted.read(pos, pos + n))
            pos += n
            if self.fake.throttle_bps:
                time.sleep(n / self.fake.throttle_bps)
        sent = 0
        while self.fake.extra_bytes < 0 or sent < self.fake.extra_bytes:
            n = step if self.fake.extra_bytes < 0 else min(step, self.fake.extra_bytes - sent)
            self.wfile.write(bytes(n))
            sent += n

    def _canned(self, status: int, headers: dict[str, str], body: bytes, head: bool) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, value, head: bool) -> None:
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _error(self, status: int, message: str, code: str = "") -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def header_only_gguf(arch: str = "llama", n_layers: int = 80, n_embd: int = 8192, n_ff: int = 28672,
                     n_head: int = 64, n_head_kv: int = 8, vocab: int = 128256) -> tuple[bytes, int]:
    """The header of a big llama-shaped GGUF (Q4_K matrices) and the size the whole file would have:
    host it with that size and every byte after the header reads as zero (defaults: a 70B-class model)."""
    from engine.gguf import BLOCK_LAYOUT, GGMLType, parse_header
    from tests.unit.gguf_builder import GGUFBytes, V

    b = GGUFBytes()
    for key, vtype, value in [("general.architecture", V.STRING, arch), ("general.name", V.STRING, f"Huge {arch}"),
                              (f"{arch}.block_count", V.UINT32, n_layers),
                              (f"{arch}.embedding_length", V.UINT32, n_embd),
                              (f"{arch}.feed_forward_length", V.UINT32, n_ff),
                              (f"{arch}.context_length", V.UINT32, 8192),
                              (f"{arch}.attention.head_count", V.UINT32, n_head),
                              (f"{arch}.attention.head_count_kv", V.UINT32, n_head_kv),
                              (f"{arch}.vocab_size", V.UINT32, vocab)]:
        b.kv(key, vtype, value)
    kv_dim = n_embd // n_head * n_head_kv
    shapes = [("token_embd.weight", [n_embd, vocab], GGMLType.Q4_K), ("output_norm.weight", [n_embd], GGMLType.F32)]
    for i in range(n_layers):
        p = f"blk.{i}."
        shapes += [(p + "attn_norm.weight", [n_embd], GGMLType.F32), (p + "ffn_norm.weight", [n_embd], GGMLType.F32),
                   (p + "attn_q.weight", [n_embd, n_embd], GGMLType.Q4_K),
                   (p + "attn_k.weight", [n_embd, kv_dim], GGMLType.Q4_K),
                   (p + "attn_v.weight", [n_embd, kv_dim], GGMLType.Q4_K),
                   (p + "attn_output.weight", [n_embd, n_embd], GGMLType.Q4_K),
                   (p + "ffn_gate.weight", [n_embd, n_ff], GGMLType.Q4_K),
                   (p + "ffn_up.weight", [n_embd, n_ff], GGMLType.Q4_K),
                   (p + "ffn_down.weight", [n_ff, n_embd], GGMLType.Q4_K)]
    offset = 0
    for name, ne, t in shapes:
        b.tensor(name, ne, t, offset=offset, data=b"")
        block_elems, block_bytes = BLOCK_LAYOUT[t]
        nbytes = ne[0] * (ne[1] if len(ne) > 1 else 1) // block_elems * block_bytes
        offset += -(-nbytes // 32) * 32
    data = b.build()
    head = parse_header(data, 1 << 50)
    return data[:head.data_offset], head.data_offset + offset
