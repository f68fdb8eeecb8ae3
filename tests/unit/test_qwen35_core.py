"""Qwen3.5 (Gated DeltaNet + gated attention) through the real scheduler, runner and CPU forward on the
tiny random-weight model of tests/golden/data (made by tests/tools/make_tiny_qwen35.py): each request's
recurrent state lives in a slot taken on admission and given back on finish/abort/preemption.

Checks: 32 greedy ids equal transformers' in sync and async mode; requests of different lengths batched
(prompts chunked across steps, so the chunked and the recurrent delta rule meet) equal each run alone;
preempted-and-recomputed requests keep their ids; an abort mid-stream gives its slot back and leaves the others
identical; no KV block or state slot is left in use. On the f32 model and its quantized variant.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.model.loader import load_model
from engine.prompt import PromptFormat
from tests.unit.test_engine_core import Harness, each_alone

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"


@pytest.fixture(scope="module", params=["f32", "q8_0"])
def tiny(request):
    """The float32 model and its quantized variant (Q8_0 / Q4_0 matrices), each with transformers' golden."""
    lm = load_model(DATA / f"tiny-qwen35-{request.param}.gguf")
    golden = dict(np.load(DATA / f"tiny-qwen35-{request.param}.golden.npz"))
    return lm, PromptFormat.from_metadata(lm.metadata).tokenizer, golden


def prompts(golden, n: int) -> list[list[int]]:
    """n prompts of different lengths (3..75 ids) from the golden prompt."""
    base = [int(t) for t in golden["prompt_ids"]]
    return [base[i % 5: i % 5 + 3 + (23 * i) % 73] for i in range(n)]


def all_free(h: Harness) -> bool:
    sched = h.core.scheduler
    return sched.kv.num_used == 0 and sched.state_slots.num_free == sched.config.max_num_seqs


@pytest.mark.parametrize("async_on", [False, True])
def test_32_greedy_ids_equal_transformers(tiny, async_on):
    h = Harness(tiny, async_on, budget=32)                       # the 80-token prompt in three chunks
    h.submit("a", tiny[2]["prompt_ids"], max_tokens=32)
    h.run()
    assert h.ids("a") == [int(t) for t in tiny[2]["greedy_ids"]]
    assert sum(1 for p in h.plans if p.seqs[0].start_position < 80) == 3
    assert all_free(h)


def test_batched_requests_equal_each_run_alone_in_both_modes(tiny):
    ps = prompts(tiny[2], 6)
    lengths = [5 + (3 * i) % 7 for i in range(6)]
    alone = each_alone(tiny, ps, lengths, budget=256)   # one-shot prefill, alone
    for async_on in (False, True):
        h = Harness(tiny, async_on, max_num_seqs=6, budget=24)
        for i, p in enumerate(ps):
            h.submit(f"r{i}", p, max_tokens=lengths[i])
        h.run()
        assert {r: h.ids(r) for r in alone} == alone, f"async={async_on}"
        assert max(len(p.seqs) for p in h.plans) >= 4                   # really batched
        assert all_free(h)


@pytest.mark.parametrize("async_on", [False, True])
def test_preemption_drops_and_recomputes_the_recurrent_state(tiny, async_on):
    ps = prompts(tiny[2], 5)
    alone = each_alone(tiny, ps, 10, budget=256)
    h = Harness(tiny, async_on, max_num_seqs=5, num_blocks=7)          # 112 token slots for 222 tokens
    for i, p in enumerate(ps):
        h.submit(f"r{i}", p, max_tokens=10)
    h.run()
    assert {r: h.ids(r) for r in alone} == alone
    starts = [s.request_id for p in h.plans for s in p.seqs if s.start_position == 0]
    assert len(starts) > len(set(starts))                               # someone was preempted and recomputed
    assert all_free(h)


@pytest.mark.parametrize("async_on", [False, True])
def test_abort_mid_stream_gives_the_state_slot_back_and_leaves_the_others_identical(tiny, async_on):
    ps = prompts(tiny[2], 4)
    ref = Harness(tiny, async_on, max_num_seqs=4)
    for i, p in enumerate(ps):
        ref.submit(f"r{i}", p, max_tokens=10)
    ref.run()
    h = Harness(tiny, async_on, max_num_seqs=4)
    for i, p in enumerate(ps):
        h.submit(f"r{i}", p, max_tokens=10)
    freed = []

    def abort_when_streaming(_):
        if len(h.events["r1"]) == 3 and "r1" in h.core.generations:
            before = h.core.scheduler.state_slots.num_free
            assert h.core.abort("r1")
            freed.append(h.core.scheduler.state_slots.num_free - before)
    h.run(on_step=abort_when_streaming)
    assert freed == [1]                                  # its slot came back at once
    assert h.finished("r1").reason == "abort" and h.ids("r1") == ref.ids("r1")[:3]
    for r in ("r0", "r2", "r3"):
        assert h.ids(r) == ref.ids(r)
    assert all_free(h)
