"""engine.hub against a hostile or failing hub and disk, on a real loopback server (tests.fake_hub) and real files:
names in the listing that could land outside the models folder, a body longer than the file, a server that
falls silent, a write that fails mid-file, a .part deleted under the download, a file of the same name already
in the folder, two repos' files of one name, and search answers that are no hub's (malformed JSON, HTML, 429).
Each ends in one sentence for the user, with nothing written outside the models folder and nothing lost."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.errors import DownloadError
from engine.hub import DownloadManager, HubAccessError, HubClient, RemoteFile, download_file
from engine.hub import download as download_module
from engine.hub.download import part_path
from tests.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
REPO = "t/Model-GGUF"
NAME = "m-Q4_0.gguf"
DATA = hashlib.sha256(b"seed").digest() * 40_000          # 1.28 MB of bytes that are not all alike


def _wait_for(check, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def hub():
    with FakeHub() as hub:
        hub.add(REPO, NAME, DATA)
        yield hub


def _listed(hub: FakeHub, name: str = NAME, repo: str = REPO) -> RemoteFile:
    client = HubClient(endpoint=hub.endpoint)
    return next(f for f in client.repo_files(repo) if f.filename == name)


def _files(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name", ["../../escape.gguf", "/abs/escape.gguf", "sub/../escape.gguf", "C:\\escape.gguf",
                                  "..\\..\\escape.gguf", "escape.gguf:stream", "CON.gguf", "sub/nul.gguf",
                                  "escape.gguf.", "esc\x01ape.gguf", "a" * 300 + ".gguf"])
def test_a_listed_name_that_is_no_plain_file_name_is_refused_naming_it_and_nothing_is_written(hub, tmp_path, name):
    hub.add(REPO, name, DATA)
    f = _listed(hub, name)
    folder = tmp_path / "models"
    with pytest.raises(DownloadError, match=r"^The hub listed a file named .* in t/Model-GGUF; it was refused because"):
        download_file(HubClient(endpoint=hub.endpoint), f, folder)
    with pytest.raises(DownloadError, match="it was refused because"):
        DownloadManager(folder, HubClient(endpoint=hub.endpoint)).enqueue(f)
    assert _files(tmp_path) == {} and not hub.ranges


def test_a_body_longer_than_the_file_stops_at_its_size_and_verifies(hub, tmp_path):
    hub.extra_bytes = 20 << 20                   # a lying server: the disk must not fill with what follows
    f = _listed(hub)
    path = download_file(HubClient(endpoint=hub.endpoint), f, tmp_path)
    assert _files(tmp_path) == {NAME: len(DATA)} and path.read_bytes() == DATA


@pytest.mark.parametrize("how", ["pause", "cancel"])
def test_pause_and_cancel_are_heard_while_the_server_sends_nothing(hub, tmp_path, monkeypatch, how):
    monkeypatch.setattr(download_module, "READ_TIMEOUT_S", 3600.0)    # silence alone would never end it
    hub.stall_after = 100_000
    manager = DownloadManager(tmp_path, HubClient(endpoint=hub.endpoint))
    i = manager.enqueue(_listed(hub))
    _wait_for(lambda: manager.states()[0].done >= 100_000, "the bytes before the silence")
    getattr(manager, how)(i)
    _wait_for(lambda: manager.states()[0].status in ("paused", "cancelled"), f"the {how}")
    part = part_path(tmp_path / NAME)
    if how == "pause":
        assert manager.states()[0].status == "paused" and part.stat().st_size >= 100_000
    else:
        assert manager.states()[0].status == "cancelled" and not part.exists()
    manager.shutdown()


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_write_that_fails_mid_file_is_one_line_and_the_part_is_kept(hub, tmp_path):
    limit = 500_000                               # the disk "fills" here: writes past it fail (EFBIG)
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            "from engine.cli import main; sys.exit(main(sys.argv[1:]))")
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code, "pull", f"{REPO}:{NAME}", "--dir", str(tmp_path)], env=env,
                          capture_output=True, text=True, timeout=120)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert last.startswith(f"error: Could not save {NAME} in {tmp_path}: File too large.") and "resume" in last
    assert _files(tmp_path) == {NAME + ".part": limit}


def test_a_models_folder_that_cannot_be_made_is_one_sentence(hub, tmp_path):
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(DownloadError, match=f"^Could not save {NAME} in .*file/models: "):
        download_file(HubClient(endpoint=hub.endpoint), _listed(hub), tmp_path / "file" / "models")


def test_a_part_deleted_during_the_download_is_named_and_a_resume_starts_over(hub, tmp_path):
    hub.throttle_bps = 2e6
    manager = DownloadManager(tmp_path, HubClient(endpoint=hub.endpoint))
    i = manager.enqueue(_listed(hub))
    part = part_path(tmp_path / NAME)
    _wait_for(lambda: part.is_file() and part.stat().st_size > 200_000, "a partial download")
    part.unlink()
    _wait_for(lambda: manager.states()[0].status != "downloading", "the end of the download")
    state = manager.states()[0]
    assert state.status == "failed" and state.error.startswith(f"{NAME}.part was deleted during the download")
    hub.throttle_bps = None
    manager.resume(i)
    _wait_for(lambda: manager.states()[0].status == "done", "the resumed download")
    assert (tmp_path / NAME).read_bytes() == DATA
    manager.shutdown()


@pytest.mark.parametrize("other", [bytes(len(DATA)), b"the user's own model"], ids=["same size", "other size"])
def test_a_file_of_that_name_already_in_the_folder_is_never_overwritten_nor_taken_for_the_download(hub, tmp_path,
                                                                                                   other):
    (tmp_path / NAME).write_bytes(other)
    with pytest.raises(DownloadError, match=f"{NAME} already exists and is not {REPO}'s {NAME}"):
        download_file(HubClient(endpoint=hub.endpoint), _listed(hub), tmp_path)
    assert (tmp_path / NAME).read_bytes() == other and _files(tmp_path) == {NAME: len(other)}


def test_the_same_file_already_there_is_verified_and_kept_without_a_download(hub, tmp_path):
    (tmp_path / NAME).write_bytes(DATA)
    assert download_file(HubClient(endpoint=hub.endpoint), _listed(hub), tmp_path) == tmp_path / NAME
    assert not hub.ranges


def test_two_repos_files_of_one_name_never_share_a_part(hub, tmp_path):
    hub.add("u/Other-GGUF", NAME, DATA[::-1])
    hub.throttle_bps = 2e6
    manager = DownloadManager(tmp_path, HubClient(endpoint=hub.endpoint))
    i = manager.enqueue(_listed(hub))
    _wait_for(lambda: manager.states()[0].done > 0, "progress")
    manager.pause(i)
    _wait_for(lambda: manager.states()[0].status == "paused", "the pause")
    with pytest.raises(DownloadError, match=f"u/Other-GGUF's {NAME} would be saved under the same name as {REPO}'s"):
        manager.enqueue(_listed(hub, repo="u/Other-GGUF"))
    assert len(manager.states()) == 1
    manager.shutdown()


def test_a_failed_download_asked_for_again_is_queued_again_not_listed_twice(hub, tmp_path):
    hub.add(REPO, "bad-Q8_0.gguf", DATA, sha256="ab" * 32)
    manager = DownloadManager(tmp_path, HubClient(endpoint=hub.endpoint))
    f = _listed(hub, "bad-Q8_0.gguf")
    i = manager.enqueue(f)
    _wait_for(lambda: manager.states()[0].status == "failed", "the failed verification")
    assert manager.enqueue(f) == i and len(manager.states()) == 1
    _wait_for(lambda: manager.states()[0].status == "failed", "the second verification")
    manager.shutdown()


HTML = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


@pytest.mark.parametrize("body, reason", [(b'[{"id": "a/b", ', "not JSON"), (HTML, "not JSON"),
                                          (b'{"models": []}', "not a list of models"),
                                          (b'[1, null]', "a model without an id")])
def test_a_search_answer_that_is_no_hubs_is_one_sentence(hub, body, reason):
    hub.answers["/api/models"] = (200, {"Content-Type": "application/json"}, body)
    with pytest.raises(DownloadError, match=rf"^search for 'qwen': the hub's answer is malformed \({reason}\); "
                                            rf"{hub.endpoint} may not be a Hugging Face hub"):
        HubClient(endpoint=hub.endpoint).search("qwen")


def test_a_malformed_listing_is_one_sentence(hub):
    hub.answers[f"/api/models/{REPO}"] = (200, {"Content-Type": "application/json"}, b'[1, "x"]')
    with pytest.raises(DownloadError, match=f"^{REPO}: the hub's answer is malformed"):
        HubClient(endpoint=hub.endpoint).repo_files(REPO)


def test_a_rate_limited_search_says_when_to_retry_after_one_request(hub):
    hub.answers["/api/models"] = (429, {"Retry-After": "1"}, b'{"error": "rate limited"}')
    with pytest.raises(DownloadError, match=r"^search for 'qwen': the hub is limiting .*try again in 1 s"):
        HubClient(endpoint=hub.endpoint).search("qwen")
    assert hub.paths.count("/api/models") == 1          # not retried behind the user's back


def test_a_search_refused_with_401_blames_the_token_not_a_repo(hub):
    hub.answers["/api/models"] = (401, {}, b'{"error": "Invalid credentials"}')
    with pytest.raises(HubAccessError, match=r"^search for 'qwen': the hub refused the access token") as refused:
        HubClient(endpoint=hub.endpoint, token="hf_expired").search("qwen")
    assert "repo" not in str(refused.value)


def test_a_listing_refused_with_401_asks_for_a_token(hub):
    hub.answers[f"/api/models/{REPO}"] = (401, {}, b'{"error": "Invalid credentials"}')
    with pytest.raises(HubAccessError, match="access token"):
        HubClient(endpoint=hub.endpoint).repo_files(REPO)


def test_a_journal_entry_of_another_shape_is_skipped_and_the_others_stay(tmp_path):
    # the journal is a file anyone may edit: an entry with a number for a name, a list, a missing or an extra
    # field is left out with a warning; the well-formed one is listed paused as after any restart
    good = {"repo_id": REPO, "filename": NAME, "size": len(DATA), "sha256": "ab" * 32, "revision": "main"}
    journal = tmp_path / "journal.json"
    journal.write_text(json.dumps([{**good, "filename": 5}, ["x"], {**good, "extra": 1},
                                   {k: v for k, v in good.items() if k != "size"}, good]), encoding="utf-8")
    manager = DownloadManager(tmp_path / "models", HubClient(endpoint="http://127.0.0.1:9"), journal=journal)
    [state] = manager.states()
    assert (state.file, state.status) == (RemoteFile(**good), "paused")
    manager.shutdown()
