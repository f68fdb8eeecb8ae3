"""Search -> pick -> download from a loopback fake hub serving the real starter GGUF; the pulling process is
killed mid-file and resumed; the hash is verified; the model loads and chats. Wrong hashes are refused with
the .part kept; the download queue pauses, resumes and cancels (engine.hub)."""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.api import ChatMessage, GenerateRequest, SamplingParams
from engine.engine import Engine
from engine.errors import DownloadError
from engine.hub import DownloadManager, HubClient, Machine, download_file, fit_verdict, group_by_quant
from engine.hub.download import part_path
from tests.fake_hub import FakeHub

pytestmark = pytest.mark.golden

REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
ROOT = Path(__file__).resolve().parents[2]


def _wait_for(check, timeout: float = 60.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _pull(hub: FakeHub, folder: Path, spec: str) -> subprocess.Popen:
    env = dict(os.environ, HF_ENDPOINT=hub.endpoint, PYTHONPATH=str(ROOT))
    return subprocess.Popen([sys.executable, "-m", "engine", "pull", spec, "--dir", str(folder)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_search_pick_kill_mid_file_resume_verify_load_and_chat(tmp_path, smollm2_path):
    with FakeHub() as hub:
        hub.add(REPO, NAME, smollm2_path)
        hub.add(REPO, "README.md", b"# SmolLM2\n")
        client = HubClient(endpoint=hub.endpoint)
        assert [r.repo_id for r in client.search("smollm2 gguf")] == [REPO]
        groups = group_by_quant(client.repo_files(REPO))
        assert [g.quant for g in groups] == ["Q4_1"]
        picked = groups[0].files[0]
        verdict = fit_verdict(client.read_header(picked), Machine(ram_free=8 << 30, gpu_free=None))
        assert verdict.fit == "cpu" and verdict.architecture == "llama"

        hub.throttle_bps = 8e6                                 # ~12 s for the file: time to kill it
        part = part_path(tmp_path / NAME)
        proc = _pull(hub, tmp_path, f"{REPO}:Q4_1")
        _wait_for(lambda: part.is_file() and part.stat().st_size > 3_000_000, what="a partial download")
        proc.kill()                                            # SIGKILL: no cleanup, as in a crash
        proc.wait(30)
        kept = part.stat().st_size
        assert 0 < kept < picked.size and not (tmp_path / NAME).exists()

        hub.throttle_bps = None
        proc = _pull(hub, tmp_path, f"{REPO}:{NAME}")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert hub.ranges[-1] == f"bytes={kept}-"              # resumed where the killed process stopped
        path = Path(out.strip().splitlines()[-1])
        assert path == tmp_path / NAME and not part.exists()
        assert hashlib.sha256(path.read_bytes()).hexdigest() == picked.sha256

    engine = Engine(max_context=512)
    try:
        engine.load(path).result(120)
        request = GenerateRequest(messages=(ChatMessage("user", "What is the capital of France?"),),
                                  params=SamplingParams.greedy(max_tokens=12))
        text, fin = engine.submit(request).text(120)
        assert fin.reason in ("stop", "length") and "Paris" in text
    finally:
        engine.shutdown()


def test_wrong_hash_is_refused_and_the_part_kept(tmp_path, smollm2_path):
    with FakeHub() as hub:
        hub.add(REPO, NAME, smollm2_path, sha256="ab" * 32)
        client = HubClient(endpoint=hub.endpoint)
        f = client.repo_files(REPO)[0]
        with pytest.raises(DownloadError, match="failed verification.*partial file is kept"):
            download_file(client, f, tmp_path)
        assert not (tmp_path / NAME).exists()
        assert part_path(tmp_path / NAME).stat().st_size == f.size


def test_split_gguf_is_refused_before_any_byte(tmp_path):
    with FakeHub() as hub:
        hub.add("t/split-GGUF", "m-Q8_0-00001-of-00002.gguf", b"GGUF" + bytes(100))
        client = HubClient(endpoint=hub.endpoint)
        with pytest.raises(DownloadError, match="split into 2 files"):
            download_file(client, client.repo_files("t/split-GGUF")[0], tmp_path)
        assert not hub.ranges and not list(tmp_path.iterdir())


def test_queue_pauses_cancels_and_resumes_in_a_new_manager_after_a_restart(tmp_path, smollm2_path):
    with FakeHub() as hub:
        hub.add(REPO, NAME, smollm2_path)
        hub.add(REPO, "copy-" + NAME, smollm2_path)
        hub.throttle_bps = 20e6
        client = HubClient(endpoint=hub.endpoint)
        files = {f.filename: f for f in client.repo_files(REPO)}
        seen: list = []
        journal = tmp_path / "journal.json"
        manager = DownloadManager(tmp_path, client, seen.append, journal=journal)
        first = manager.enqueue(files[NAME])
        second = manager.enqueue(files["copy-" + NAME])
        status = lambda m, i: next(s for s in m.states() if s.id == i)   # noqa: E731
        assert status(manager, second).status == "queued"
        _wait_for(lambda: status(manager, first).done > 2_000_000, what="progress")
        assert any(s.id == first and s.speed > 0 and s.eta_s for s in seen)
        manager.pause(first)
        _wait_for(lambda: status(manager, first).status == "paused", what="pause")
        paused_at = status(manager, first).done
        assert 0 < paused_at < files[NAME].size
        manager.cancel(second)
        _wait_for(lambda: status(manager, second).status == "cancelled", what="cancel")
        assert not part_path(tmp_path / ("copy-" + NAME)).exists()
        manager.shutdown()

        restarted = DownloadManager(tmp_path, client, journal=journal)      # as after a crash or a reboot
        [state] = restarted.states()
        assert (state.file, state.status, state.done) == (files[NAME], "paused", paused_at)
        hub.throttle_bps = None
        restarted.resume(state.id)
        _wait_for(lambda: status(restarted, state.id).status == "done", what="the resumed download")
        assert status(restarted, state.id).path == tmp_path / NAME
        assert hub.ranges[-1] == f"bytes={paused_at}-"
        assert DownloadManager(tmp_path, client, journal=journal).states() == []
        restarted.shutdown()


def test_free_disk_is_checked_before_any_byte(tmp_path):
    with FakeHub() as hub:
        hub.add("t/huge-GGUF", "huge-Q8_0.gguf", b"GGUF", size=10**16, sha256="0" * 64)    # 10 PB
        client = HubClient(endpoint=hub.endpoint)
        with pytest.raises(DownloadError, match="Not enough disk space"):
            download_file(client, client.repo_files("t/huge-GGUF")[0], tmp_path)
        assert not hub.ranges and not list(tmp_path.iterdir())
