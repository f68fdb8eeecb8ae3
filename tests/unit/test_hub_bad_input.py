"""`python -m engine pull` and engine.hub given a repo id no hub can have, an HF_ENDPOINT that is no URL, or an
HF_HUB_*_TIMEOUT that is no number: one line naming the bad value, exit status 1, no request sent and nothing
written (engine.hub.client / endpoint)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.hub import HubAccessError, HubClient, InvalidEndpointError, InvalidRepoIdError, RemoteFile
from engine.hub.endpoint import TIMEOUT_ENVS, InvalidTimeoutError, check_timeouts, checked_endpoint
from tests.fake_hub import FakeHub

ROOT = Path(__file__).resolve().parents[2]
BAD_REPO_IDS = ["not a repo!!", "", ":", "a/b/c/d", "../../etc/passwd", "a" * 97, "a\x00b", "owner/na--me",
                "owner/name-"]
BAD_ENDPOINTS = ["http://[::1", "http://h:99999", "http://h:port", "", "foo", "ftp://mirror", "http://",
                 "http://a b", "http://mirror\n"]


@pytest.fixture
def listener():
    """A loopback port that accepts connections without answering: any request the code sends shows as a
    connection waiting in its backlog."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


def _connections(server: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = server.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.parametrize("spec", BAD_REPO_IDS)
def test_pull_of_an_invalid_repo_id_is_one_line_and_sends_nothing(spec, listener, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{listener.getsockname()[1]}")
    folder = tmp_path / "models"
    assert main(["pull", spec, "--dir", str(folder)]) == 1
    err = capsys.readouterr().err
    repo = spec.partition(":")[0]
    assert err == f"error: {repo!r} is not a valid Hugging Face repo id (owner/name): give one such as " \
                  f"Qwen/Qwen3-8B-GGUF, made of letters, digits, '-', '_' and '.', names of at most 96 characters.\n"
    assert _connections(listener) == 0 and not folder.exists()


def test_pull_of_an_invalid_repo_id_in_a_real_process_has_no_traceback(listener, tmp_path):
    env = dict(os.environ, HF_ENDPOINT=f"http://127.0.0.1:{listener.getsockname()[1]}", PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "engine", "pull", "not a repo!!", "--dir", str(tmp_path / "m")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("error: 'not a repo!!' is not a valid Hugging Face repo id (owner/name)")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert _connections(listener) == 0 and not (tmp_path / "m").exists()


def test_the_client_refuses_an_invalid_repo_id_in_a_listing_and_a_url_but_asks_the_hub_about_a_valid_one():
    with FakeHub() as hub:
        client = HubClient(endpoint=hub.endpoint)
        with pytest.raises(InvalidRepoIdError, match=r"^'a/b/c/d' is not a valid Hugging Face repo id"):
            client.repo_files("a/b/c/d")
        hand_made = RemoteFile("not a repo!!", "m-Q8_0.gguf", 10, "", "main")
        with pytest.raises(InvalidRepoIdError, match=r"^'not a repo!!' is not a valid"):
            client.url(hand_made)
        with pytest.raises(InvalidRepoIdError):
            client.read_range(hand_made, 0, 4)
        with pytest.raises(HubAccessError, match="^t/missing-GGUF was not found on the hub"):
            client.repo_files("t/missing-GGUF")           # a valid id: the hub is asked, and says no
        assert not hub.ranges


@pytest.mark.parametrize("value", ["http://[::1", "http://h:99999"])
def test_a_malformed_hf_endpoint_is_named_in_one_line_not_a_traceback_at_import(value, tmp_path):
    """huggingface_hub raises a bare ValueError for these when it is imported."""
    env = dict(os.environ, HF_ENDPOINT=value, PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-m", "engine", "pull", "a/b", "--dir", str(tmp_path / "m")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: HF_ENDPOINT={value!r} is not a valid hub address (")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("value", BAD_ENDPOINTS)
def test_every_endpoint_that_is_no_http_url_is_refused_naming_its_source(value, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", value)
    with pytest.raises(InvalidEndpointError, match=r"^HF_ENDPOINT=.* is not a valid hub address .*unset it"):
        checked_endpoint()
    with pytest.raises(InvalidEndpointError, match=r"^HF_ENDPOINT="):
        HubClient()
    monkeypatch.delenv("HF_ENDPOINT")
    with pytest.raises(InvalidEndpointError, match=r"^The hub endpoint .* is not a valid hub address"):
        HubClient(endpoint=value or " ")


@pytest.mark.parametrize("value, expected", [("https://hf-mirror.com/", "https://hf-mirror.com"),
                                             ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
                                             ("http://[::1]:80/hub", "http://[::1]:80/hub")])
def test_good_endpoints_pass_unchanged_but_for_a_trailing_slash(value, expected, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", value)
    assert checked_endpoint() == expected == HubClient().endpoint
    monkeypatch.delenv("HF_ENDPOINT")
    assert checked_endpoint() is None
    assert HubClient(endpoint=value).endpoint == expected


@pytest.mark.parametrize("name", TIMEOUT_ENVS)
def test_a_timeout_variable_huggingface_hub_cannot_parse_is_named_in_one_line_not_a_traceback(name, tmp_path):
    """huggingface_hub (the real one, imported by the child) raises a bare ValueError for it at import."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), **{name: "abc"})
    library = subprocess.run([sys.executable, "-c", "from huggingface_hub import constants"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert "ValueError" in library.stderr          # what is guarded against: still the library's behaviour
    done = subprocess.run([sys.executable, "-m", "engine", "pull", "a/b", "--dir", str(tmp_path / "m")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"error: {name}='abc' is not a whole number of seconds; set it to one such as 30, or " \
                          f"unset it to use huggingface_hub's default.\n"
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("name", TIMEOUT_ENVS)
def test_timeout_values_are_refused_exactly_where_int_refuses_them(name, monkeypatch):
    for bad in ["abc", "1.5", "", " ", "10s", "1e3"]:
        monkeypatch.setenv(name, bad)
        with pytest.raises(InvalidTimeoutError, match=rf"^{name}={bad!r} is not a whole number of seconds"):
            check_timeouts()
    for good in ["30", " 5 ", "0", "-1", "1_000"]:     # int() takes these: so does huggingface_hub's import
        monkeypatch.setenv(name, good)
        check_timeouts()
    monkeypatch.delenv(name)
    check_timeouts()
