"""Scheduler in sync mode with fabricated runner outputs: admission limits, chunked prefill, decode
priority, finish/abort mid-batch, stop conditions, block exhaustion and preemption, no leaks."""
import numpy as np
import pytest

from engine.core.kv_blocks import KVBlockManager
from engine.core.sched_types import SchedulerConfig, StepOutput
from engine.core.scheduler import Scheduler
from engine.core.step_batch import build_step_input
from engine.errors import ContextOverflowError

EOS = 0


def make(num_blocks=64, block_size=4, **cfg) -> Scheduler:
    cfg.setdefault("max_model_len", 256)
    return Scheduler(SchedulerConfig(**cfg), KVBlockManager(num_blocks, block_size))


def step(sched: Scheduler, tokens: dict[str, int] | None = None, default: int = 7):
    """Schedule one step and answer it at once: `tokens[request_id]` (else `default`) for every row."""
    out = sched.schedule()
    sampled = [(tokens or {}).get(s.request_id, default) for s in out.seqs]
    updates = sched.update_from_output(StepOutput(out.step_id, sampled)) if out.seqs else []
    return out, {u.request_id: u for u in updates}


def rows(out) -> dict[str, tuple[int, int, bool]]:
    """request id -> (start position, number of tokens, samples)."""
    return {s.request_id: (s.start_position, s.num_tokens, s.samples) for s in out.seqs}


def assert_all_free(sched: Scheduler):
    assert not sched.has_unfinished_requests
    assert sched.kv.num_free == sched.kv.num_blocks and sched.kv.num_used == 0
    assert not sched.running and not sched.waiting


def test_max_num_seqs_bounds_a_step_and_admission_is_fcfs():
    sched = make(max_num_seqs=2, max_num_batched_tokens=64)
    for i in range(4):
        sched.add_request(f"r{i}", [1, 2, 3], max_tokens=2)
    out, _ = step(sched)
    assert list(rows(out)) == ["r0", "r1"]
    out, ups = step(sched)            # second token: r0, r1 finish ("length")
    assert list(rows(out)) == ["r0", "r1"] and {u.finish_reason for u in ups.values()} == {"length"}
    out, _ = step(sched)
    assert list(rows(out)) == ["r2", "r3"]
    step(sched)
    assert_all_free(sched)


def test_token_budget_splits_prompts_into_chunks():
    sched = make(max_num_seqs=4, max_num_batched_tokens=16)
    sched.add_request("a", range(1, 11), max_tokens=3)
    sched.add_request("b", range(1, 11), max_tokens=3)
    out, ups = step(sched)
    assert rows(out) == {"a": (0, 10, True), "b": (0, 6, False)}
    assert out.num_tokens == 16 and list(ups) == ["a"]     # b's chunk samples nothing
    out, ups = step(sched)
    assert rows(out) == {"a": (10, 1, True), "b": (6, 4, True)}
    assert sched.get_request("b").output_token_ids == [7]


def test_chunked_prefill_positions_and_slots_follow_the_block_table():
    sched = make(num_blocks=32, block_size=4, max_num_batched_tokens=16)
    prompt = list(range(100, 140))    # 40 tokens: chunks of 16, 16, 8
    sched.add_request("long", prompt, max_tokens=2)
    seen_positions = []
    for expected_start, expected_n in [(0, 16), (16, 16), (32, 8)]:
        out = sched.schedule()
        batch = build_step_input(out, block_size=4)
        (seq,) = out.seqs
        assert (seq.start_position, seq.num_tokens) == (expected_start, expected_n)
        assert list(batch.token_ids) == prompt[expected_start:expected_start + expected_n]
        assert list(batch.positions) == list(range(expected_start, expected_start + expected_n))
        table = seq.block_table
        assert len(table) == -(-seq.seq_len // 4)
        want_slots = [table[p // 4] * 4 + p % 4 for p in batch.positions]
        assert list(batch.slot_mapping) == want_slots
        assert list(batch.seq_lens) == [expected_start + expected_n]
        assert list(batch.query_start_loc) == [0, expected_n]
        assert list(batch.sample_rows) == [expected_start + expected_n == 40]
        seen_positions += list(batch.positions)
        sched.update_from_output(StepOutput(out.step_id, [55]))
    assert seen_positions == list(range(40))
    out, ups = step(sched, default=56)            # the decode feeds the sampled 55 at position 40
    assert rows(out) == {"long": (40, 1, True)} and out.seqs[0].token_ids == (55,)
    assert ups["long"].finish_reason == "length"
    assert sched.kv.num_free == 32


def test_running_decodes_are_scheduled_before_a_long_prefill_chunk():
    sched = make(max_num_seqs=4, max_num_batched_tokens=8, num_blocks=64)
    for rid in ("d0", "d1", "d2"):
        sched.add_request(rid, [1, 2], max_tokens=50)
    step(sched)                                   # all three prefilled (6 tokens)
    sched.add_request("long", range(1, 31), max_tokens=2)
    starts = []
    for _ in range(6):
        out, _ = step(sched)
        r = rows(out)
        assert all(r[d][1] == 1 for d in ("d0", "d1", "d2")), "a decode was starved"
        if "long" in r:
            assert r["long"][1] <= 5           # 8 minus the three reserved decode tokens
            starts.append(r["long"][0])
    assert starts == [0, 5, 10, 15, 20, 25]


def test_prefill_beside_decodes_is_capped_and_whole_once_alone():
    # the CPU's setting: a prompt that arrives while others decode is taken in short steps (each step is what
    # every decoding request waits for its next token), and in whole chunks once nobody decodes
    sched = make(max_num_seqs=4, max_num_batched_tokens=16, num_blocks=64, prefill_beside_decodes=3)
    sched.add_request("d", [1, 2], max_tokens=4)
    step(sched)                                   # d prefilled alone: its first token
    sched.add_request("long", range(1, 41), max_tokens=2)
    out, _ = step(sched)
    assert rows(out) == {"d": (2, 1, True), "long": (0, 3, False)}
    out, _ = step(sched)
    assert rows(out) == {"d": (3, 1, True), "long": (3, 3, False)}
    out, ups = step(sched)                        # d's fourth token: it finishes
    assert rows(out) == {"d": (4, 1, True), "long": (6, 3, False)} and ups["d"].finish_reason == "length"
    out, _ = step(sched)
    assert rows(out) == {"long": (9, 16, False)}


def test_prefill_beside_decodes_is_shared_by_every_prompt_of_the_step():
    sched = make(max_num_seqs=4, max_num_batched_tokens=16, num_blocks=64, prefill_beside_decodes=5)
    sched.add_request("d", [1], max_tokens=9)
    step(sched)
    sched.add_request("a", range(1, 4), max_tokens=2)
    sched.add_request("b", range(1, 9), max_tokens=2)
    out, _ = step(sched)
    assert rows(out) == {"d": (1, 1, True), "a": (0, 3, True), "b": (0, 2, False)}
    out, _ = step(sched)                          # a decodes now too; b gets the 5
    assert rows(out) == {"d": (2, 1, True), "a": (3, 1, True), "b": (2, 5, False)}


def test_oldest_prefill_gets_budget_first_and_finishes_first():
    sched = make(max_num_seqs=4, max_num_batched_tokens=10, num_blocks=64)
    sched.add_request("first", range(1, 26), max_tokens=1)
    sched.add_request("second", range(1, 26), max_tokens=1)
    out, _ = step(sched)
    assert rows(out) == {"first": (0, 10, False)}
    out, _ = step(sched)
    assert rows(out) == {"first": (10, 10, False)}
    out, ups = step(sched)
    assert rows(out) == {"first": (20, 5, True), "second": (0, 5, False)}
    assert ups["first"].finish_reason == "length"


def test_eos_finishes_one_request_mid_batch_and_frees_its_blocks_at_once():
    sched = make(num_blocks=16, block_size=4, max_num_batched_tokens=32)
    for rid in ("a", "b", "c"):
        sched.add_request(rid, range(1, 9), max_tokens=10, stop_token_ids=[EOS])
    step(sched)
    out, ups = step(sched, {"b": EOS})      # the step itself grew every table to 3 blocks
    assert ups["b"].finish_reason == "stop" and ups["b"].token_id == EOS
    assert ups["a"].finish_reason is None
    assert sched.get_request("b") is None
    live = [sched.get_request(r).block_table for r in ("a", "c")]
    assert sched.kv.num_used == sum(map(len, live)) == 6
    out, _ = step(sched)
    assert list(rows(out)) == ["a", "c"] and out.finished_request_ids == ("b",)


def test_abort_mid_batch_and_in_the_waiting_queue():
    sched = make(max_num_seqs=2, num_blocks=16, max_num_batched_tokens=32)
    for rid in ("a", "b", "c"):
        sched.add_request(rid, [5, 6, 7], max_tokens=10)
    step(sched)
    assert sched.abort("a") and sched.abort("c")          # one running, one waiting
    assert not sched.abort("a") and not sched.abort("nobody")
    out, _ = step(sched)
    assert list(rows(out)) == ["b"] and set(out.finished_request_ids) == {"a", "c"}
    sched.abort("b")
    assert_all_free(sched)
    assert sched.schedule().is_empty


def test_caller_finishes_a_request_on_a_stop_string():
    sched = make()
    sched.add_request("a", [1, 2], max_tokens=10)
    step(sched)
    assert sched.finish_request("a", "stop")
    assert_all_free(sched)


def test_length_limits_max_tokens_and_max_model_len():
    sched = make(max_model_len=8, max_num_batched_tokens=16)
    sched.add_request("ctx", range(1, 6), max_tokens=100)        # 5 + 3 outputs reach 8
    sched.add_request("mt", [1], max_tokens=2)
    finished = {}
    outputs = {"ctx": [], "mt": []}
    while sched.has_unfinished_requests:
        out, ups = step(sched)
        assert max(p for s in out.seqs for p in range(s.start_position, s.seq_len)) < 8
        for rid, u in ups.items():
            outputs[rid].append(u.token_id)
            if u.finish_reason:
                finished[rid] = u.finish_reason
    assert finished == {"ctx": "length", "mt": "length"}
    assert len(outputs["ctx"]) == 3 and len(outputs["mt"]) == 2
    assert_all_free(sched)


def test_requests_that_can_never_fit_are_refused_up_front():
    sched = make(num_blocks=4, block_size=4, max_model_len=64)
    with pytest.raises(ContextOverflowError):
        sched.add_request("long", range(64), max_tokens=1)
    with pytest.raises(ContextOverflowError):
        sched.add_request("big", range(10), max_tokens=7)          # 17 tokens > 16 slots
    sched.add_request("ok", range(10), max_tokens=6)
    with pytest.raises(ValueError):
        sched.add_request("ok", [1], max_tokens=1)
    with pytest.raises(ValueError):
        sched.add_request("empty", [], max_tokens=1)


def test_no_admission_until_blocks_free():
    sched = make(num_blocks=4, block_size=4, max_num_batched_tokens=32, max_num_seqs=4)
    sched.add_request("a", range(1, 11), max_tokens=5)      # 10 + 1 tokens: 3 blocks
    # b's 4-token prompt would fit the one free block, but its first output would not: not admitted.
    sched.add_request("b", range(1, 5), max_tokens=1)
    out, _ = step(sched)
    assert list(rows(out)) == ["a"]
    while sched.get_request("a"):
        out, _ = step(sched)
        assert "b" not in rows(out)
        assert sched.get_request("a") is None or sched.get_request("a").num_preemptions == 0
    out, ups = step(sched)
    assert rows(out) == {"b": (0, 4, True)} and ups["b"].finish_reason == "length"
    assert_all_free(sched)


def test_block_exhaustion_preempts_the_newest_and_recomputes_it():
    sched = make(num_blocks=6, block_size=4, max_num_batched_tokens=32, max_num_seqs=4)
    sched.add_request("old", range(1, 8), max_tokens=12)    # grows to 19 tokens: 5 blocks
    sched.add_request("new", range(1, 4), max_tokens=12)
    _, ups = step(sched)
    assert set(sched.get_request(r).status.value for r in ("old", "new")) == {"running"}
    preempted_at = None
    outputs = {rid: [u.token_id] for rid, u in ups.items()}
    for i in range(200):
        out, ups = step(sched, default=1 + i % 50)
        for rid, u in ups.items():
            outputs[rid].append(u.token_id)
        new = sched.get_request("new")
        if new is not None and new.num_preemptions and preempted_at is None:
            preempted_at = i
            assert new.status.value == "waiting" and new.num_computed_tokens == 0
            assert new.block_table == [] and sched.get_request("old").status.value == "running"
        if not sched.has_unfinished_requests:
            break
    assert preempted_at is not None
    assert len(outputs["old"]) == 12 and len(outputs["new"]) == 12
    assert_all_free(sched)


def test_recompute_after_preemption_feeds_prompt_and_outputs_so_far():
    sched = make(num_blocks=3, block_size=4, max_num_batched_tokens=32)
    sched.add_request("old", [1, 2, 3, 4, 5], max_tokens=7)   # 12 tokens = 3 blocks
    sched.add_request("new", [9, 9], max_tokens=6)            # 8 tokens = 2 blocks
    step(sched, default=11)
    r = sched.get_request("new")
    for _ in range(20):
        if r.num_preemptions:
            break
        step(sched, default=11)
    assert r.num_preemptions == 1 and r.output_token_ids
    known = list(r.prompt_token_ids) + r.output_token_ids
    for _ in range(20):
        out = sched.schedule()
        if "new" in rows(out):
            seq = next(s for s in out.seqs if s.request_id == "new")
            assert seq.start_position == 0 and list(seq.token_ids) == known
            break
        sched.update_from_output(StepOutput(out.step_id, [11] * len(out.seqs)))
    else:
        pytest.fail("the preempted request was never readmitted")


def test_outputs_must_come_back_in_step_order():
    sched = make()
    sched.add_request("a", [1, 2], max_tokens=5)
    out = sched.schedule()
    with pytest.raises(ValueError, match="expected step 0"):
        sched.update_from_output(StepOutput(out.step_id + 1, [3]))
    sched.update_from_output(StepOutput(out.step_id, [3]))
    with pytest.raises(ValueError):
        sched.update_from_output(StepOutput(out.step_id, [3]))


def test_failed_step_names_its_requests_and_leaves_the_rest_usable():
    sched = make()
    sched.add_request("a", [1, 2], max_tokens=5)
    sched.add_request("b", [3, 4], max_tokens=5)
    out = sched.schedule()
    failed = sched.fail_step(out.step_id)
    assert failed == ["a", "b"]
    sched.finish_request("a", "error")
    sched.finish_request("b", "error")
    assert_all_free(sched)
    sched.add_request("c", [1], max_tokens=1)
    out, ups = step(sched)
    assert ups["c"].finish_reason == "length"


def test_empty_schedule_consumes_no_step_id():
    sched = make()
    assert sched.schedule().is_empty
    sched.add_request("a", [1], max_tokens=1)
    out = sched.schedule()
    assert out.step_id == 0
    batch = build_step_input(out, block_size=4, max_blocks=8)
    assert batch.block_tables.shape == (1, 8) and batch.block_tables.dtype == np.int32
    assert batch.slot_mapping.dtype == np.int64 and list(batch.logits_indices) == [0]


def test_config_requires_room_for_every_decode():
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=4)
    with pytest.raises(ValueError, match="bad scheduler limits"):
        SchedulerConfig(prefill_beside_decodes=0)
