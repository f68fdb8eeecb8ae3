"""`python -m engine ...` as a user runs it: subprocesses on the real models."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.golden
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, timeout: float = 300, input: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=timeout, env=env, input=input)


def test_generate_json_on_the_starter_matches_reference(smollm2_path, smollm2_reference):
    ref = smollm2_reference["generate"][2]               # system + user message
    system, user = (m["content"] for m in ref["messages"])
    proc = run("generate", "--starter", "--system", system, "--prompt", user, "--max-tokens", "5",
               "--top-logits", "10", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["prompt_token_ids"] == ref["prompt_ids"]
    assert out["generated_token_ids"] == ref["hf_greedy_ids"][:5]
    assert out["finish_reason"] == "length" and out["text"].startswith("The primary colors")
    top = dict((i, v) for i, v in out["first_top_logits"])
    for i, v in ref["hf_first_top10"]:
        assert abs(top[i] - v) < 0.05


def test_generate_raw_on_gemma_streams_text(gemma_path, gemma_reference):
    ref = gemma_reference["generate"][0]
    proc = run("generate", "--model", str(gemma_path), "--raw", "--prompt", ref["text"], "--max-tokens", "3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "the capital of"
    assert "[length; 6 prompt + 3 generated tokens" in proc.stderr


def test_inspect_summarizes_metadata(gemma_path):
    proc = run("inspect", str(gemma_path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    for needle in ("architecture:  gemma3", "Q4_K_M", "context:       32768", "no (completion only)",
                   "Q5_0 x81", "sliding window 512"):
        assert needle in proc.stdout


def test_chat_repl_answers_and_exits(smollm2_path):
    proc = run("chat", str(smollm2_path), "--temperature", "0", "--max-tokens", "12",
               input="What is the capital of France?\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    assert "Paris" in proc.stdout


def test_bench_json_reports_every_figure(smollm2_path):
    proc = run("bench", "--model", str(smollm2_path), "--json", "--prompt-tokens", "32", "--decode-tokens", "4")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["prompt_tokens"] == 32 and out["decode_tokens"] == 4
    for key in ("load_s", "prefill_tok_s", "decode_tok_s", "time_to_first_token_s"):
        assert out[key] > 0


@pytest.mark.parametrize(("args", "said"), [
    (("--prompt-tokens", "0"), "--prompt-tokens: must be at least 1"),
    (("--repeat", "0"), "--repeat: must be at least 1"),
    (("--concurrency", "two"), "is not a whole number"),
    (("--backend", "nosuch"), "invalid choice: 'nosuch'"),
    (("--prompt-tokens", "100000"), "do not fit the model's context of 8,192 tokens"),
])
def test_bench_refuses_counts_it_cannot_run_in_words(smollm2_path, args, said):
    """Not a traceback, and not a 100,000 x 100,000 mask allocated before the refusal."""
    proc = run("bench", "--model", str(smollm2_path), *args, timeout=120)
    assert proc.returncode != 0 and said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_bad_model_path_is_a_clean_error(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    proc = run("generate", "--model", str(bad), "--prompt", "hi", timeout=60)
    assert proc.returncode == 1 and proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT delivery to a child differs on Windows")
def test_chat_ctrl_c_stops_a_reply_and_the_repl_continues(smollm2_path):
    import signal
    import threading
    import time

    # The child gets SIGINT's default disposition back: a test run started in the background (a CI job under
    # `cmd &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler, so the signal
    # would do nothing (the reply ran to its end and the test failed, through no fault of the chat loop).
    proc = subprocess.Popen([sys.executable, "-m", "engine", "chat", str(smollm2_path), "--max-tokens", "400",
                             "--seed", "1"], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(iter(lambda: proc.stdout.read(1), "")), daemon=True)
    reader.start()
    try:
        proc.stdin.write("Tell me a very long story about a dragon.\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 120
        while "".join(out).count("> ") < 1 or len("".join(out).split("> ", 1)[-1]) < 20:
            assert time.monotonic() < deadline and proc.poll() is None, "no reply text"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        proc.stdin.write("/exit\n")
        proc.stdin.close()
        proc.wait(timeout=60)
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "[stopped]" in err
