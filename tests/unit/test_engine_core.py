"""EngineCore + ModelRunner + CpuStepExecutor on a tiny random-weight llama (tests/golden/data): the real
scheduler, runner, readback pool and forward pass, driven step by step on this thread.

Checks: async scheduling really overlaps (step N+1 launched with device-fed placeholders before step N
is read), and gives the same greedy ids as sync mode, with one request and with many of different
lengths batched together, equal to each request run alone; host-side stops discard the speculative
token; aborts and injected step failures touch only their requests; every KV block is free after.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.api import Finished, GenerateRequest, SamplingParams, TextDelta
from engine.backends.registry import create
from engine.core.cpu_executor import CpuStepExecutor
from engine.core.engine_core import EngineCore
from engine.core.runner import ModelRunner
from engine.core.setup import make_scheduler
from engine.generation import Generation
from engine.model.loader import load_model
from engine.model.step import KVCache
from engine.prompt import PromptFormat

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
BLOCK = 16


@pytest.fixture(scope="module")
def tiny():
    lm = load_model(DATA / "tiny-llama-f32.gguf")
    golden = dict(np.load(DATA / "tiny-llama-f32.golden.npz"))
    return lm, PromptFormat.from_metadata(lm.metadata).tokenizer, golden


class Harness:
    """One core over the tiny model; collects every event per request."""

    def __init__(self, tiny, async_on: bool, max_num_seqs: int = 8, num_blocks: int = 64, budget: int = 64):
        lm, self.tokenizer, _ = tiny
        kv = KVCache.allocate(lm.config, num_blocks, BLOCK, state_slots=max_num_seqs)
        executor = CpuStepExecutor(create("cpu"), lm.model, kv, max_num_seqs)
        scheduler = make_scheduler(num_blocks, BLOCK, 256, async_on, max_num_seqs, budget, "cpu")
        self.core = EngineCore(scheduler, ModelRunner(executor, BLOCK, max_num_seqs))
        self.events: dict[str, list] = {}
        self.plans = []
        self.core.runner.fault_injector = self.plans.append        # an observer: records every launch

    def submit(self, rid: str, prompt_ids, max_tokens: int = 8, stop_ids=(), **params) -> None:
        request = GenerateRequest(prompt="unused", request_id=rid,
                                  params=SamplingParams.greedy(max_tokens=max_tokens, **params))
        self.events[rid] = []
        gen = Generation(request, list(prompt_ids), self.tokenizer, frozenset(stop_ids),
                         self.events[rid].append)
        self.core.add_request(gen, list(prompt_ids), stop_ids)

    def run(self, max_steps: int = 10_000, on_step=None) -> None:
        for i in range(max_steps):
            if not self.core.has_work:
                return
            self.core.step()
            if on_step:
                on_step(i)
        raise AssertionError("core did not finish")

    def finished(self, rid: str) -> Finished:
        fin = self.events[rid][-1]
        assert isinstance(fin, Finished), self.events[rid]
        return fin

    def ids(self, rid: str) -> list[int]:
        return list(self.finished(rid).output_token_ids)


def each_alone(tiny, ps, max_tokens, budget: int = 64) -> dict[str, list[int]]:
    """Request r{i} = prompt ps[i] run by itself on a one-sequence core: what a batch must reproduce.
    `max_tokens`: one for all, or a list (one per prompt)."""
    lengths = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(ps)
    alone = {}
    for i, (p, n) in enumerate(zip(ps, lengths, strict=True)):
        h = Harness(tiny, async_on=False, max_num_seqs=1, budget=budget)
        h.submit(f"r{i}", p, max_tokens=n)
        h.run()
        alone[f"r{i}"] = h.ids(f"r{i}")
    return alone


def prompts(golden, n: int) -> list[list[int]]:
    """n prompts of different lengths (3..24 ids), all from the golden prompt's vocabulary."""
    base = [int(t) for t in golden["prompt_ids"]]
    return [base[i % 5: i % 5 + 3 + (7 * i) % 22] for i in range(n)]


@pytest.mark.parametrize("async_on", [False, True])
def test_one_request_reproduces_the_transformers_greedy_ids(tiny, async_on):
    h = Harness(tiny, async_on)
    h.submit("a", tiny[2]["prompt_ids"], max_tokens=8)
    h.run()
    assert h.ids("a") == [int(t) for t in tiny[2]["greedy_ids"]]
    assert h.finished("a").reason == "length"
    assert h.core.scheduler.kv.num_used == 0


def test_async_launches_the_next_step_from_device_ids_before_reading_the_last(tiny):
    h = Harness(tiny, async_on=True)
    in_flight_at_launch = []
    h.core.runner.fault_injector = lambda plan: (h.plans.append(plan),
                                                 in_flight_at_launch.append(len(h.core.in_flight)))
    h.submit("a", tiny[2]["prompt_ids"], max_tokens=8)
    h.run()
    assert len(h.plans) == 8                     # max_tokens is known when scheduling: nothing past it
    assert in_flight_at_launch == [0] + [1] * 7  # each decode launched while the step before was unread
    fed = [p for p in h.plans if p.prev_step_id is not None]
    assert len(fed) == 7
    assert all(p.seqs[0].token_ids == (-1,) and p.seqs[0].prev_row == 0 for p in fed)


@pytest.mark.parametrize("async_on", [False, True])
def test_stop_id_seen_on_the_host_discards_the_speculative_token(tiny, async_on):
    greedy = [int(t) for t in tiny[2]["greedy_ids"]]          # 263 x5, 293, 74, 74
    h = Harness(tiny, async_on)
    h.submit("a", tiny[2]["prompt_ids"], max_tokens=8, stop_ids=(293,))
    h.run()
    assert h.ids("a") == greedy[:6] and h.finished("a").reason == "stop"
    assert len(h.plans) == (7 if async_on else 6)             # async: one step ran past the stop, ignored
    assert h.core.scheduler.kv.num_used == 0 and not h.core.scheduler.requests


def test_batched_requests_equal_each_run_alone_in_both_modes(tiny):
    ps = prompts(tiny[2], 8)
    lengths = [6 + (5 * i) % 9 for i in range(8)]              # different max_tokens too
    alone = each_alone(tiny, ps, lengths)
    for async_on in (False, True):
        h = Harness(tiny, async_on, max_num_seqs=8, budget=32)   # prompts are chunked across steps
        for i, p in enumerate(ps):
            h.submit(f"r{i}", p, max_tokens=lengths[i])
        h.run()
        assert {r: h.ids(r) for r in alone} == alone, f"async={async_on}"
        assert max(len(p.seqs) for p in h.plans) == 8              # really batched
        assert h.core.scheduler.kv.num_used == 0


def test_abort_mid_stream_leaves_the_others_identical(tiny):
    ps = prompts(tiny[2], 4)
    ref = Harness(tiny, async_on=True)
    for i, p in enumerate(ps):
        ref.submit(f"r{i}", p, max_tokens=10)
    ref.run()
    h = Harness(tiny, async_on=True)
    for i, p in enumerate(ps):
        h.submit(f"r{i}", p, max_tokens=10)

    def abort_when_streaming(_):
        if len(h.events["r1"]) == 3 and "r1" in h.core.generations:
            assert h.core.abort("r1")
    h.run(on_step=abort_when_streaming)
    assert h.finished("r1").reason == "abort" and len(h.ids("r1")) == 3
    assert h.ids("r1") == ref.ids("r1")[:3]
    for r in ("r0", "r2", "r3"):
        assert h.ids(r) == ref.ids(r)
    assert h.core.scheduler.kv.num_used == 0


@pytest.mark.parametrize("async_on", [False, True])
def test_injected_step_failure_fails_its_requests_only_and_the_core_goes_on(tiny, async_on):
    ps = prompts(tiny[2], 3)
    ref = Harness(tiny, async_on, max_num_seqs=2)
    for i, p in enumerate(ps):
        ref.submit(f"r{i}", p, max_tokens=6)
    ref.run()

    h = Harness(tiny, async_on, max_num_seqs=2)                   # r2 waits: not in the failing step

    def fail_step_3(plan):
        h.plans.append(plan)
        if plan.step_id == 3:
            raise RuntimeError("injected device fault")
    h.core.runner.fault_injector = fail_step_3
    for i, p in enumerate(ps):
        h.submit(f"r{i}", p, max_tokens=6)
    h.run()
    for r in ("r0", "r1"):
        fin = h.finished(r)
        assert fin.reason == "error" and "injected device fault" in fin.error and "step 3" in fin.error
        assert h.ids(r) == ref.ids(r)[:len(h.ids(r))]
    assert h.ids("r2") == ref.ids("r2") and h.finished("r2").reason == "length"
    assert h.core.scheduler.kv.num_used == 0
    h.submit("after", ps[0], max_tokens=6)                          # the core is still usable
    h.run()
    assert h.ids("after") == ref.ids("r0")


def test_text_streams_in_order_and_matches_the_ids(tiny):
    h = Harness(tiny, async_on=True)
    h.submit("a", tiny[2]["prompt_ids"], max_tokens=8)
    h.run()
    deltas = [e for e in h.events["a"] if isinstance(e, TextDelta)]
    assert [t for d in deltas for t in d.token_ids] == h.ids("a")
    assert "".join(d.text for d in deltas) == h.tokenizer.decode(h.ids("a"))


@pytest.mark.parametrize("async_on", [False, True])
def test_preemption_under_kv_pressure_keeps_the_ids(tiny, async_on):
    ps = prompts(tiny[2], 6)
    alone = each_alone(tiny, ps, 12)
    h = Harness(tiny, async_on, max_num_seqs=6, num_blocks=5)      # 80 token slots for ~150 tokens
    for i, p in enumerate(ps):
        h.submit(f"r{i}", p, max_tokens=12)
    h.run()
    assert {r: h.ids(r) for r in alone} == alone
    starts = [s.request_id for p in h.plans for s in p.seqs if s.start_position == 0]
    assert len(starts) > len(set(starts))                         # someone was preempted and recomputed
    assert h.core.scheduler.kv.num_used == 0
