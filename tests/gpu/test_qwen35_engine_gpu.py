"""Qwen3.5 (tiny random-weight hybrid, tests/golden/data) through the whole Engine on the GPU: the
scheduler's recurrent-state slots drive the device conv/delta state. Several concurrent requests of
different lengths, async scheduling on and off, and a KV cache too small for all of them at once (requests
preempted, their recurrent state dropped and recomputed) give the same ids as each request run alone; every
KV block and state slot is free afterwards; the model really runs on the GPU (no CPU fallback)."""
from __future__ import annotations

from pathlib import Path

import pytest

from engine.api import GenerateRequest, SamplingParams
from engine.engine import Engine

pytestmark = pytest.mark.gpu
MODEL = Path(__file__).resolve().parents[2] / "tests" / "golden" / "data" / "tiny-qwen35-f32.gguf"
TIMEOUT = 180
TEXTS = ["The quick brown fox", "Once upon a time there was a small", "A", "Numbers: one two three four five"]
MAX_TOKENS = [12, 7, 16, 9]
SMALL = 48                 # KV tokens: the longest request fits, all four at once do not


def req(i: int, rid: str) -> GenerateRequest:
    return GenerateRequest(prompt=TEXTS[i], request_id=rid, params=SamplingParams.greedy(max_tokens=MAX_TOKENS[i]))


def run(gpu_name: str, async_on: bool, max_num_seqs: int, together: bool, max_context: int = 256
        ) -> tuple[list[list[int]], int]:
    """(each request's ids, preemptions seen)."""
    eng = Engine(max_context=max_context, backend=gpu_name, async_scheduling=async_on, max_num_seqs=max_num_seqs)
    try:
        eng.load(MODEL).result(TIMEOUT)
        assert eng.model_info.backend.startswith(("cuda:", "hip:")), eng.model_info.backend
        sched = eng._model.core.scheduler
        preempted, preempt = [], sched._preempt            # an observer: the real preemption still runs
        sched._preempt = lambda req: (preempted.append(req.request_id), preempt(req))
        if together:
            handles = [eng.submit(req(i, f"r{i}")) for i in range(len(TEXTS))]
            done = [h.text(TIMEOUT)[1] for h in handles]
        else:
            done = [eng.submit(req(i, f"r{i}")).text(TIMEOUT)[1] for i in range(len(TEXTS))]
        assert [d.error for d in done] == [None] * len(TEXTS)
        assert sched.kv.num_used == 0 and sched.state_slots.num_free == sched.config.max_num_seqs
        return [d.output_token_ids for d in done], len(preempted)
    finally:
        eng.shutdown()


def test_concurrent_requests_async_on_and_off_equal_each_alone(gpu_name):
    alone, _ = run(gpu_name, async_on=False, max_num_seqs=1, together=False)
    assert [len(a) for a in alone] == MAX_TOKENS
    assert run(gpu_name, async_on=False, max_num_seqs=4, together=True)[0] == alone
    assert run(gpu_name, async_on=True, max_num_seqs=4, together=True)[0] == alone
    for async_on in (False, True):             # room for about one request: the others are preempted
        ids, preemptions = run(gpu_name, async_on=async_on, max_num_seqs=4, together=True, max_context=SMALL)
        assert ids == alone and preemptions > 0, (async_on, preemptions)
