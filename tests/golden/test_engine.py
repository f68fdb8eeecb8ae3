"""The threaded Engine on the real SmolLM2: streaming, stop conditions, aborts, errors, lifecycles."""
from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path

import pytest

from engine.api import (
    ChatMessage,
    Finished,
    GenerateRequest,
    LoadProgress,
    PromptProgress,
    SamplingParams,
    TextDelta,
)
from engine.core.setup import DEFAULT_PREFILL_CHUNK, PREFILL_BESIDE_DECODES
from engine.engine import Engine
from engine.errors import InvalidModelError, ModelFileError, RequestAborted, UnsupportedModelError
from engine.gguf.mutate import with_metadata
from engine.gguf.types import GGUFValueType

pytestmark = pytest.mark.golden

DATA = Path(__file__).parent / "data"

TIMEOUT = 120


@pytest.fixture(scope="module")
def engine(smollm2_path):
    eng = Engine()
    eng.load(smollm2_path).result(TIMEOUT)
    yield eng
    eng.shutdown()


def chat(text: str, **params) -> GenerateRequest:
    return GenerateRequest(messages=(ChatMessage("user", text),), params=SamplingParams.greedy(**params))


def test_greedy_chat_streams_reference_reply_and_stops_on_end_of_turn(engine, smollm2_reference):
    ref = smollm2_reference["generate"][0]                 # "What is the capital of France?"
    events = list(engine.submit(chat(ref["messages"][0]["content"], max_tokens=40, top_logits=5)).events(TIMEOUT))
    deltas, fin = events[:-1], events[-1]
    assert all(isinstance(e, TextDelta) for e in deltas) and isinstance(fin, Finished)
    assert list(fin.prompt_token_ids) == ref["prompt_ids"]
    assert list(fin.output_token_ids) == ref["hf_greedy_ids"]           # ends with <|im_end|> (id 2)
    assert fin.reason == "stop"
    assert "".join(e.text for e in deltas) == "The capital of France is Paris."
    assert [i for i, _ in fin.first_top_logits][:2] == [504, 60]
    assert fin.usage.prompt_tokens == 37 and fin.usage.generated_tokens == 8
    assert fin.usage.time_to_first_token_s > 0


def test_stop_string_spanning_tokens_is_not_emitted(engine):
    # " of" and " France" are separate tokens; the stop string starts in one and ends in the other
    text, fin = engine.submit(chat("What is the capital of France?", max_tokens=40, stop=(" of Fr",))).text(TIMEOUT)
    assert text == "The capital"
    assert fin.reason == "stop"
    assert len(fin.output_token_ids) == 4          # The, capital, of, France


def test_max_tokens_finishes_with_length(engine):
    text, fin = engine.submit(chat("Write a haiku about autumn.", max_tokens=3)).text(TIMEOUT)
    assert fin.reason == "length" and len(fin.output_token_ids) == 3
    assert text == "In the heart"


def test_full_context_finishes_with_length_and_long_prompt_is_an_error(smollm2_path):
    eng = Engine(max_context=48)
    try:
        eng.load(smollm2_path).result(TIMEOUT)
        _, fin = eng.submit(chat("What is the capital of France?", max_tokens=100)).text(TIMEOUT)
        assert fin.reason == "stop" and len(fin.prompt_token_ids) + len(fin.output_token_ids) == 45
        _, fin = eng.submit(chat("Write a haiku about autumn.", max_tokens=100)).text(TIMEOUT)   # a long reply
        assert fin.reason == "length" and len(fin.prompt_token_ids) + len(fin.output_token_ids) == 48
        text, fin = eng.submit(chat("word " * 60, max_tokens=5)).text(TIMEOUT)
        assert fin.reason == "error" and text == ""
        assert "context holds 48" in fin.error and "tokens" in fin.error
    finally:
        eng.shutdown()


def test_abort_from_another_thread_mid_stream(engine):
    handle = engine.submit(GenerateRequest(prompt="Once upon a time",
                                           params=SamplingParams(temperature=1.0, seed=3, max_tokens=400)))
    events = []
    for event in handle.events(TIMEOUT):
        events.append(event)
        if len(events) == 3:
            threading.Thread(target=engine.abort, args=(handle.request_id,)).start()
    fin = events[-1]
    assert fin.reason == "abort"
    assert 3 <= len(fin.output_token_ids) < 400


def test_two_requests_in_a_row_and_queued_requests_are_independent(engine):
    first = engine.submit(chat("Reply with the single word OK", max_tokens=6))
    second = engine.submit(chat("Reply with the single word OK", max_tokens=6))   # queued behind the first
    a, fa = first.text(TIMEOUT)
    b, fb = second.text(TIMEOUT)
    assert a == b and fa.output_token_ids == fb.output_token_ids
    assert a.startswith("I'm sorry")


def test_a_prompt_arriving_beside_a_decoding_reply_is_taken_in_short_steps(engine):
    # On the CPU a step of a whole prompt chunk takes seconds deep in a context, and a reply being written waits
    # that long for each token; beside one, a prompt goes in PREFILL_BESIDE_DECODES steps, whole chunks once alone
    short, whole = PREFILL_BESIDE_DECODES["cpu"], DEFAULT_PREFILL_CHUNK["cpu"]
    assert engine.model_info.backend == "cpu" and short < whole
    timeline: list[tuple[str, object]] = []               # both requests' events, in the engine thread's order
    writing, finished = threading.Event(), threading.Semaphore(0)

    def sink(name):
        def put(event):
            timeline.append((name, event))
            if name == "reply" and isinstance(event, TextDelta):
                writing.set()
            if isinstance(event, Finished):
                finished.release()
        return put

    engine.submit(chat("Write a long story about a dragon.", max_tokens=8), sink("reply"))
    assert writing.wait(TIMEOUT)
    engine.submit(GenerateRequest(prompt_token_ids=tuple(range(100, 1200)), report_progress=True,
                                  params=SamplingParams.greedy(max_tokens=1)), sink("prompt"))
    assert finished.acquire(timeout=TIMEOUT) and finished.acquire(timeout=TIMEOUT)
    reply_end = next(i for i, (n, e) in enumerate(timeline) if n == "reply" and isinstance(e, Finished))
    steps, done = [], 0
    for i, (name, event) in enumerate(timeline):
        if name == "prompt" and isinstance(event, PromptProgress):
            steps.append((i < reply_end, event.processed - done))
            done = event.processed
    beside = [n for during, n in steps if during]
    assert len(beside) >= 3 and all(n <= short for n in beside), steps
    assert max(n for during, n in steps if not during) == whole, steps
    tokens_meanwhile = sum(isinstance(e, TextDelta) for n, e in timeline[:reply_end] if n == "reply")
    assert tokens_meanwhile >= 4 and timeline[reply_end][1].reason == "length"


def test_seeded_sampling_reproduces(engine):
    params = SamplingParams(temperature=0.9, seed=42, max_tokens=12)
    runs = [engine.submit(GenerateRequest(prompt="The weather today", params=params)).text(TIMEOUT)[1]
            for _ in range(2)]
    assert runs[0].output_token_ids == runs[1].output_token_ids


def test_a_failing_request_leaves_the_engine_usable(engine):
    # wrong-typed values are refused on submit (SamplingParams.validate), naming the field
    bad = GenerateRequest(prompt="Hello", params=SamplingParams(max_tokens=5, stop=(1,)))
    _, fin = engine.submit(bad).text(TIMEOUT)
    assert fin.reason == "error" and "stop string" in fin.error
    _, fin = engine.submit(GenerateRequest(prompt="Hi", params=SamplingParams(seed="x"))).text(TIMEOUT)
    assert fin.reason == "error" and "seed" in fin.error
    text, fin = engine.submit(chat("What is the capital of France?", max_tokens=8)).text(TIMEOUT)
    assert fin.reason == "stop" and "Paris" in text


def test_two_engines_at_once(smollm2_path, engine):
    other = Engine()
    try:
        info = other.load(smollm2_path).result(TIMEOUT)
        assert info.architecture == "llama" and info.has_chat_template
        h1 = other.submit(chat("What is 12 times 12?", max_tokens=4))
        h2 = engine.submit(chat("What is 12 times 12?", max_tokens=4))
        assert h1.text(TIMEOUT)[1].output_token_ids == h2.text(TIMEOUT)[1].output_token_ids
    finally:
        other.shutdown()


def test_a_tokenizer_we_refuse_is_refused_before_the_weights_load(tmp_path):
    """A model whose pre-tokenizer is unknown: the load fails naming it, and no weight was read first (no
    progress reported), so a large file's refusal does not wait for its load."""
    tiny = tmp_path / "made-up-pre.gguf"
    tiny.write_bytes(with_metadata((DATA / "tiny-qwen2-f32.gguf").read_bytes(),
                                   {"tokenizer.ggml.pre": (GGUFValueType.STRING, "made-up-pre")}))
    eng = Engine()
    try:
        seen: list[LoadProgress] = []
        with pytest.raises(UnsupportedModelError, match="made-up-pre"):
            eng.load(tiny, progress=seen.append).result(TIMEOUT)
        assert seen == []
    finally:
        eng.shutdown()


def test_load_progress_cancel_bad_file_and_no_model(smollm2_path, tmp_path):
    eng = Engine()
    try:
        _, fin = eng.submit(chat("hi")).text(TIMEOUT)
        assert fin.reason == "error" and "No model is loaded" in fin.error

        seen: list[LoadProgress] = []
        eng.load(smollm2_path, progress=seen.append).result(TIMEOUT)
        fractions = [p.fraction for p in seen]
        assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(fractions) > 100

        started = threading.Event()
        future: Future = eng.load(smollm2_path, progress=lambda p: started.set())
        assert started.wait(TIMEOUT)
        eng.cancel_load()
        with pytest.raises(RequestAborted):
            future.result(TIMEOUT)
        assert eng.model_info is not None                   # a cancelled switch keeps the model it had
        text, fin = eng.submit(chat("hi")).text(TIMEOUT)
        assert fin.reason in ("stop", "length") and text

        bad = tmp_path / "bad.gguf"
        bad.write_bytes(b"GGUF" + b"\xff" * 60)
        with pytest.raises(InvalidModelError):
            eng.load(bad).result(TIMEOUT)
        # a path that is no file is the engine's clear error too, not a bare OSError the app calls a bug
        with pytest.raises(ModelFileError, match="no such file"):
            eng.load(tmp_path / "moved-away.gguf").result(TIMEOUT)
        with pytest.raises(ModelFileError, match="a folder"):
            eng.load(tmp_path).result(TIMEOUT)
        assert eng.model_info is not None                   # neither took the loaded model away

        eng.unload().result(TIMEOUT)
        _, fin = eng.submit(chat("hi")).text(TIMEOUT)
        assert fin.reason == "error"
    finally:
        eng.shutdown()
    with pytest.raises(Exception, match="shut down"):
        eng.submit(chat("hi"))


def test_engine_import_does_not_pull_qt():
    code = "import sys, engine.engine, engine.cli; assert 'PySide6' not in sys.modules, 'Qt imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_cli_runs_without_the_server_dependencies():
    # The GPU machine has numpy and a driver binding but no starlette/uvicorn: `engine bench` must still parse.
    code = ("import sys; sys.modules['starlette'] = sys.modules['uvicorn'] = None; sys.argv = ['engine', 'bench', "
            "'--help']\nfrom engine import cli\ntry: cli.main()\nexcept SystemExit as e: assert e.code == 0, e.code")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "--prompt-tokens" in out.stdout
