"""The threaded Engine on the real SmolLM2 with async scheduling on and off: same greedy ids with one
request and with 8 concurrent requests of different lengths, equal to the same requests run one at a
time; abort of one mid-stream leaves the others identical; an injected step failure fails only the
requests in that step; every KV block is free afterwards; the mode and its reason are reported."""
from __future__ import annotations

import pytest

from engine.api import ChatMessage, GenerateRequest, SamplingParams
from engine.engine import Engine

pytestmark = pytest.mark.golden

TIMEOUT = 120
QUESTIONS = ["What is the capital of France?", "Write a haiku about autumn.", "Hi",
             "Name three primary colors.", "What is 12 times 12?", "Tell me a joke about cats.",
             "Translate 'good morning' into Spanish.", "Why is the sky blue? Answer in one sentence."]
MAX_TOKENS = [14, 6, 10, 12, 5, 16, 8, 11]


def request(i: int, rid: str) -> GenerateRequest:
    return GenerateRequest(messages=(ChatMessage("user", QUESTIONS[i]),), request_id=rid,
                           params=SamplingParams.greedy(max_tokens=MAX_TOKENS[i]))


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async"])
def engine(request, smollm2_path):
    eng = Engine(max_context=2048, async_scheduling=request.param)
    info = eng.load(smollm2_path).result(TIMEOUT)
    assert info.async_scheduling is request.param
    yield eng
    eng.shutdown()


@pytest.fixture(scope="module")
def one_at_a_time(smollm2_path):
    """Every request alone on a sync engine that runs one sequence at a time: the reference."""
    eng = Engine(max_context=2048, async_scheduling=False, max_num_seqs=1)
    try:
        eng.load(smollm2_path).result(TIMEOUT)
        return [eng.submit(request(i, f"ref{i}")).text(TIMEOUT)[1] for i in range(len(QUESTIONS))]
    finally:
        eng.shutdown()


def kv_blocks_in_use(eng: Engine) -> int:
    stats = eng.stats()
    return stats.kv_blocks_total - stats.kv_blocks_free


def test_one_request_matches_the_reference(engine, one_at_a_time, smollm2_reference):
    ref = smollm2_reference["generate"][0]
    text, fin = engine.submit(GenerateRequest(messages=(ChatMessage("user", ref["messages"][0]["content"]),),
                                              params=SamplingParams.greedy(max_tokens=40))).text(TIMEOUT)
    assert list(fin.output_token_ids) == ref["hf_greedy_ids"] and text == "The capital of France is Paris."
    _, fin = engine.submit(request(5, "one")).text(TIMEOUT)
    assert fin.output_token_ids == one_at_a_time[5].output_token_ids


def test_eight_concurrent_requests_equal_one_at_a_time(engine, one_at_a_time):
    handles = [engine.submit(request(i, f"c{i}")) for i in range(len(QUESTIONS))]
    results = [h.text(TIMEOUT) for h in handles]
    for (_text, fin), ref in zip(results, one_at_a_time, strict=True):
        assert fin.reason == ref.reason and fin.output_token_ids == ref.output_token_ids, fin.request_id
    assert {fin.reason for _, fin in results} == {"stop", "length"}
    assert kv_blocks_in_use(engine) == 0


def test_abort_one_mid_stream_leaves_the_others_identical(engine, one_at_a_time):
    long = GenerateRequest(prompt="Once upon a time", request_id="victim",
                           params=SamplingParams.greedy(max_tokens=200))
    others = [engine.submit(request(i, f"o{i}")) for i in (0, 3, 5)]
    victim = engine.submit(long)
    seen = 0
    for _event in victim.events(TIMEOUT):
        seen += 1
        if seen == 4:
            victim.abort()
    assert victim.finished.reason == "abort" and 4 <= len(victim.finished.output_token_ids) < 200
    for h, i in zip(others, (0, 3, 5), strict=True):
        assert h.text(TIMEOUT)[1].output_token_ids == one_at_a_time[i].output_token_ids
    assert kv_blocks_in_use(engine) == 0


def test_injected_step_failure_fails_its_requests_and_the_engine_stays_usable(engine, one_at_a_time):
    steps = []

    def fail_fifth(plan):
        steps.append(plan.step_id)
        if len(steps) == 5:
            raise RuntimeError("injected device fault")
    engine.set_fault_injector(fail_fifth).result(TIMEOUT)
    try:
        handles = [engine.submit(request(i, f"f{i}")) for i in (0, 5)]
        fins = [h.text(TIMEOUT)[1] for h in handles]
    finally:
        engine.set_fault_injector(None).result(TIMEOUT)
    for fin, i in zip(fins, (0, 5), strict=True):
        assert fin.reason == "error" and "injected device fault" in fin.error and "Generation failed" in fin.error
        ref = one_at_a_time[i].output_token_ids
        assert fin.output_token_ids == ref[:len(fin.output_token_ids)]
    assert kv_blocks_in_use(engine) == 0
    _, fin = engine.submit(request(0, "after")).text(TIMEOUT)
    assert fin.output_token_ids == one_at_a_time[0].output_token_ids


def test_environment_turns_async_off_and_says_why(smollm2_path, monkeypatch):
    monkeypatch.setenv("HALO_ASYNC_SCHEDULING", "0")
    eng = Engine(max_context=256)
    try:
        info = eng.load(smollm2_path).result(TIMEOUT)
        assert info.async_scheduling is False and "HALO_ASYNC_SCHEDULING=0" in info.async_reason
    finally:
        eng.shutdown()
    monkeypatch.delenv("HALO_ASYNC_SCHEDULING")
    eng = Engine(max_context=256)
    try:
        info = eng.load(smollm2_path).result(TIMEOUT)
        assert info.async_scheduling is True and "safe async sampled-token readback" in info.async_reason
        assert info.backend == "cpu"
    finally:
        eng.shutdown()
