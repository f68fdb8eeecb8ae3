"""The hub's API through `huggingface_hub`: search GGUF repos, list a repo's files with LFS sha256 and sizes,
and read a remote GGUF's header with HTTP Range requests through the engine's bounded parser.

The endpoint is HF_ENDPOINT when set (mirrors), else huggingface.co: `huggingface_hub` reads it, and
engine.hub.endpoint checks it first. Every failure becomes a DownloadError subclass whose text is one sentence
for the user; `_hub_errors` is the one place that maps the library's exceptions to them.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

import httpx2

# Concrete submodules, not the package's lazy attributes: PyInstaller's import scan must see them.
from huggingface_hub import constants
from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError
from huggingface_hub.file_download import hf_hub_url
from huggingface_hub.hf_api import HfApi
from huggingface_hub.utils import build_hf_headers, get_session

from engine.errors import DownloadError, InvalidModelError, short_repr
from engine.gguf import GGUFHeader, parse_header
from engine.hub.endpoint import checked_endpoint

FIRST_HEADER_READ = 1 << 20          # most headers fit; a 262k vocabulary needs ~8 MiB (read doubles up to:)
MAX_HEADER_BYTES = 64 << 20
TIMEOUT_S = 20.0
MAX_SEARCH_ANSWER = 16 << 20         # a search answer is a few KB; more is not a hub talking


class HubUnreachableError(DownloadError):
    """No answer from the hub (offline, DNS, firewall, timeout)."""


class HubAccessError(DownloadError):
    """The hub answered no: a gated or private repo without a (valid) token, or a missing repo or file."""


class InvalidRepoIdError(DownloadError):
    """A repo id no hub repo can have (not owner/name, other characters, too long): refused before any request."""


@dataclass(frozen=True)
class RepoSummary:
    repo_id: str
    downloads: int = 0
    likes: int = 0
    gated: bool = False


@dataclass(frozen=True)
class RemoteFile:
    repo_id: str
    filename: str              # path inside the repo
    size: int                  # bytes (LFS size)
    sha256: str                # LFS sha256, lower-case hex; "" when the hub gave none
    revision: str              # the commit the listing came from, so parts and resumes stay consistent


class HubClient:
    """One hub endpoint and an optional token. Blocking calls; run them off the GUI thread."""

    def __init__(self, endpoint: str | None = None, token: str | None = None):
        self.endpoint = checked_endpoint(endpoint or None) or constants.ENDPOINT
        self.token = token or None
        self._api = HfApi(endpoint=self.endpoint, token=self.token or False)

    def headers(self) -> dict[str, str]:
        return build_hf_headers(token=self.token or False)

    def search(self, query: str, limit: int = 30) -> list[RepoSummary]:
        """GGUF model repos matching `query`, most downloaded first. One request, no retries: list_models
        retries a dead network for ~20 s and waits out a 429's Retry-After five times (minutes of a silent page)."""
        what = f"search for {short_repr(query)}"
        params = {"filter": "gguf", "sort": "downloads", "limit": str(limit)}         # as list_models sends
        if query:
            params["search"] = query
        with _hub_errors(what, self.endpoint), get_session().stream(
                "GET", self.endpoint + "/api/models", params=params, headers=self.headers(), timeout=TIMEOUT_S) as r:
            if r.status_code in (401, 403):     # a search names no repo: a gated one is not the cause
                raise HubAccessError(f"{what}: " + (
                    f"the hub refused the access token (HTTP {r.status_code}); enter a new one, or remove it to "
                    f"search without one." if self.token else
                    f"the hub refused it (HTTP {r.status_code}); enter an access token."))
            _raise_for_status(r, what)
            return [_repo_summary(item) for item in _json_list(r, what)[:limit]]

    def repo_files(self, repo_id: str, revision: str | None = None) -> list[RemoteFile]:
        """Every file of the repo with its size and LFS sha256 (one `model_info(files_metadata=True)` call)."""
        with _hub_errors(repo_id, self.endpoint):      # the listing's fields too: a hostile answer has any shape
            info = self._api.model_info(repo_id, revision=revision, files_metadata=True, timeout=TIMEOUT_S)
            rev = info.sha or revision or "main"
            return [RemoteFile(repo_id, s.rfilename, int(s.lfs.size if s.lfs else s.size or 0),
                               (s.lfs.sha256 if s.lfs else "").lower(), rev) for s in info.siblings or ()]

    def url(self, f: RemoteFile) -> str:
        """The resolve URL (the hub answers with a redirect to its storage)."""
        with _hub_errors(f.repo_id, self.endpoint):                  # hf_hub_url validates the repo id
            return hf_hub_url(f.repo_id, f.filename, revision=f.revision, endpoint=self.endpoint)

    def read_header(self, f: RemoteFile) -> GGUFHeader:
        """The file's GGUF header from its first bytes (Range requests, doubling up to MAX_HEADER_BYTES).
        Raises InvalidModelError for a malformed or hostile header, DownloadError when the hub fails."""
        want = FIRST_HEADER_READ
        while True:
            prefix = self.read_range(f, 0, min(want, f.size))
            try:
                return parse_header(prefix, f.size)
            except InvalidModelError:
                if len(prefix) >= f.size or want >= MAX_HEADER_BYTES:
                    raise
                want *= 4                    # maybe only cut short: read more and parse again

    def read_range(self, f: RemoteFile, start: int, length: int) -> bytes:
        """`length` bytes from `start`; the status is checked before any body is read, and at most
        `length` bytes are, so a server that ignores Range never streams a whole model here."""
        headers = {**self.headers(), "Range": f"bytes={start}-{start + length - 1}"}
        with _hub_errors(f.filename, self.endpoint), get_session().stream(
                "GET", self.url(f), headers=headers, follow_redirects=True, timeout=TIMEOUT_S) as r:
            _raise_for_status(r, f.filename)
            if r.status_code != 206:
                raise DownloadError(f"The server did not honour a range request for {f.filename}.")
            out = bytearray()
            for chunk in r.iter_bytes(1 << 20):
                out += chunk
                if len(out) >= length:
                    break
            return bytes(out[:length])


def _json_list(r, what: str) -> list:
    """The answer's JSON list, read up to MAX_SEARCH_ANSWER bytes."""
    body = bytearray()
    for chunk in r.iter_bytes():
        body += chunk
        if len(body) > MAX_SEARCH_ANSWER:
            raise MalformedAnswer(f"more than {MAX_SEARCH_ANSWER >> 20} MB")
    value = json.loads(body)
    if not isinstance(value, list):
        raise MalformedAnswer("not a list of models")
    return value


def _repo_summary(item) -> RepoSummary:
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        raise MalformedAnswer("a model without an id")
    def count(key: str) -> int:
        return v if isinstance(v := item.get(key), int) else 0
    return RepoSummary(item["id"], count("downloads"), count("likes"), bool(item.get("gated")))


class MalformedAnswer(ValueError):
    """The hub's answer parsed, but is not what a hub sends (reported by _hub_errors)."""


def unreachable(endpoint: str, error: Exception) -> HubUnreachableError:
    return HubUnreachableError(f"The model hub at {endpoint} cannot be reached ({type(error).__name__}); "
                               f"check the network connection, then retry.")


def _raise_for_status(r, what: str) -> None:
    if r.status_code == 429:
        raise DownloadError(_rate_limited(what, r.headers.get("Retry-After")))
    if r.status_code in (401, 403):
        raise HubAccessError(_refused(what, r.status_code))
    if r.status_code == 404:
        raise HubAccessError(f"{what} was not found on the hub.")
    if r.status_code >= 400:
        raise DownloadError(f"{what}: the hub answered HTTP {r.status_code}.")


class _hub_errors:
    """Turns huggingface_hub's and httpx's exceptions into our typed, user-worded errors. `what` names the repo,
    file or search for the user; where the call validates a repo id (model_info, hf_hub_url), it is that id."""

    def __init__(self, what: str, endpoint: str):
        self.what, self.endpoint = what, endpoint

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        if e is None or isinstance(e, DownloadError):
            return False
        if isinstance(e, HFValidationError):        # raised before any request: nothing was sent or written
            raise InvalidRepoIdError(
                f"{short_repr(self.what)} is not a valid Hugging Face repo id (owner/name): give one such as "
                f"Qwen/Qwen3-8B-GGUF, made of letters, digits, '-', '_' and '.', names of at most 96 characters."
            ) from e
        if isinstance(e, GatedRepoError):
            raise HubAccessError(f"{self.what} is gated: accept its terms on the hub and enter an access token.") from e
        if isinstance(e, RepositoryNotFoundError):
            raise HubAccessError(f"{self.what} was not found on the hub (or is private: enter an access token).") from e
        if isinstance(e, HfHubHTTPError):
            status = e.response.status_code if e.response is not None else "?"
            if status == 429:
                raise DownloadError(_rate_limited(self.what, e.response.headers.get("Retry-After"))) from e
            if status in (401, 403):
                raise HubAccessError(_refused(self.what, status)) from e
            raise DownloadError(f"{self.what}: the hub answered an error ({status}).") from e
        if isinstance(e, httpx2.TransportError):
            raise unreachable(self.endpoint, e) from e
        if isinstance(e, (ValueError, KeyError, TypeError, AttributeError)):    # JSON that is no hub's answer
            raise DownloadError(f"{self.what}: the hub's answer is malformed ({_reason(e)}); {self.endpoint} may "
                                f"not be a Hugging Face hub (check HF_ENDPOINT), or retry later.") from e
        return False


def _reason(e: Exception) -> str:
    if isinstance(e, MalformedAnswer):
        return str(e)
    return "not JSON" if isinstance(e, json.JSONDecodeError) else f"unexpected fields: {type(e).__name__}"


def _refused(what: str, status: int) -> str:
    return (f"{what}: the hub refused access (HTTP {status}); this repo may be gated: accept its terms on the hub "
            f"and enter an access token.")


def _rate_limited(what: str, retry_after: str | None) -> str:
    wait = f"in {retry_after.strip()} s" if retry_after and retry_after.strip().isdigit() else "in a minute"
    return (f"{what}: the hub is limiting how often it is asked (HTTP 429); try again {wait}, or enter an access "
            f"token (signed-in requests get a higher limit).")
