"""Async scheduling with fabricated outputs: step N+1 is scheduled before step N's ids reach the host.
Placeholders, device-side id copies, discarding the speculative token of a finished request, abort
and preemption with a step in flight."""
import pytest

from engine.core.kv_blocks import KVBlockManager
from engine.core.sched_types import PLACEHOLDER_TOKEN_ID, SchedulerConfig, StepOutput
from engine.core.scheduler import Scheduler
from engine.core.step_batch import build_step_input

EOS = 0


def make(num_blocks=64, block_size=4, async_scheduling=True, **cfg) -> Scheduler:
    cfg.setdefault("max_model_len", 256)
    cfg.setdefault("max_num_batched_tokens", 64)
    config = SchedulerConfig(async_scheduling=async_scheduling, **cfg)
    return Scheduler(config, KVBlockManager(num_blocks, block_size))


def answer(sched, out, tokens: dict[str, int], default: int = 7):
    sampled = [tokens.get(s.request_id, default) for s in out.seqs]
    return {u.request_id: u for u in sched.update_from_output(StepOutput(out.step_id, sampled))}


def by_id(out):
    return {s.request_id: s for s in out.seqs}


def test_next_step_is_scheduled_before_the_previous_ids_arrive():
    sched = make()
    sched.add_request("a", [1, 2, 3], max_tokens=10)
    out0 = sched.schedule()
    out1 = sched.schedule()                        # step 0's id is still on the device
    (seq,) = out1.seqs
    assert (seq.start_position, seq.token_ids, seq.prev_row) == (3, (PLACEHOLDER_TOKEN_ID,), 0)
    assert out1.prev_step_id == 0 and seq.samples
    batch = build_step_input(out1, block_size=4)
    assert list(batch.prev_token_dst) == [0] and list(batch.prev_token_src) == [0]
    assert list(batch.positions) == [3] and list(batch.seq_lens) == [4]
    req = sched.get_request("a")
    assert req.num_output_placeholders == 2 and req.num_computed_tokens == 4
    assert sched.schedule().is_empty               # never two placeholders deep
    assert answer(sched, out0, {"a": 42})["a"].token_id == 42
    assert req.output_token_ids == [42] and req.num_output_placeholders == 1
    out2 = sched.schedule()
    (seq,) = out2.seqs
    assert (seq.start_position, seq.token_ids, seq.prev_row, out2.prev_step_id) == (
        4, (PLACEHOLDER_TOKEN_ID,), 0, 1)
    answer(sched, out1, {"a": 43})
    assert req.output_token_ids == [42, 43]


def test_placeholder_rows_point_at_the_right_row_of_the_previous_step():
    sched = make()
    sched.add_request("a", [1, 2], max_tokens=10)
    sched.add_request("b", [1, 2, 3, 4], max_tokens=10)
    out0 = sched.schedule()
    sched.add_request("c", [5], max_tokens=10)
    out1 = sched.schedule()
    rows1 = by_id(out1)
    assert rows1["a"].prev_row == by_id(out0)["a"].row
    assert rows1["b"].prev_row == by_id(out0)["b"].row
    assert rows1["c"].prev_row is None and rows1["c"].token_ids == (5,)
    batch = build_step_input(out1, block_size=4)
    assert list(batch.token_ids) == [PLACEHOLDER_TOKEN_ID, PLACEHOLDER_TOKEN_ID, 5]
    assert list(batch.prev_token_dst) == [0, 1] and list(batch.prev_token_src) == [0, 1]


def test_sync_mode_never_schedules_a_request_with_a_token_in_flight():
    sched = make(async_scheduling=False)
    sched.add_request("a", [1, 2, 3], max_tokens=10)
    out0 = sched.schedule()
    assert sched.schedule().is_empty
    answer(sched, out0, {})
    (seq,) = sched.schedule().seqs
    assert seq.token_ids == (7,) and seq.prev_row is None


def test_finish_at_step_n_discards_the_speculative_step_n_plus_1_token_and_frees_blocks():
    sched = make(num_blocks=16, block_size=4)
    sched.add_request("a", [1, 2, 3, 4], max_tokens=20, stop_token_ids=[EOS])
    sched.add_request("b", [1, 2, 3, 4], max_tokens=20, stop_token_ids=[EOS])
    out0 = sched.schedule()
    out1 = sched.schedule()
    answer(sched, out0, {})
    out2 = sched.schedule()                        # step 2 in flight behind step 1
    assert set(by_id(out2)) == {"a", "b"}
    ups = answer(sched, out1, {"a": EOS})          # a stops at step 1 ...
    assert ups["a"].finish_reason == "stop"
    assert sched.get_request("a") is None
    b_blocks = sched.get_request("b").block_table
    assert sched.kv.num_used == len(b_blocks)      # ... and its blocks are free at once
    out3 = sched.schedule()
    assert set(by_id(out3)) == {"b"} and out3.finished_request_ids == ("a",)
    ups = answer(sched, out2, {"a": 999, "b": 5})  # step 2's token for a is discarded
    assert set(ups) == {"b"}
    ups = answer(sched, out3, {"b": EOS})
    assert ups["b"].finish_reason == "stop"
    assert sched.kv.num_free == 16 and not sched.has_unfinished_requests


def test_max_tokens_is_known_ahead_so_no_token_is_wasted():
    sched = make()
    sched.add_request("a", [1, 2], max_tokens=2)
    out0 = sched.schedule()
    out1 = sched.schedule()
    assert by_id(out1)["a"].prev_row == 0
    assert sched.schedule().is_empty               # both allowed tokens are already in flight
    answer(sched, out0, {})
    assert sched.schedule().is_empty
    ups = answer(sched, out1, {})
    assert ups["a"].finish_reason == "length" and sched.kv.num_used == 0


def test_max_model_len_is_known_ahead_too():
    sched = make(max_model_len=5)
    sched.add_request("a", [1, 2, 3], max_tokens=100)
    out0, out1 = sched.schedule(), sched.schedule()
    assert sched.schedule().is_empty
    answer(sched, out0, {})
    ups = answer(sched, out1, {})
    assert ups["a"].finish_reason == "length"
    assert sched.kv.num_used == 0


@pytest.mark.parametrize("reason", ["abort", "stop"])
def test_ending_a_request_with_steps_in_flight_ignores_their_outputs(reason):
    sched = make(num_blocks=8)
    sched.add_request("a", [1, 2, 3], max_tokens=10)
    sched.add_request("b", [1, 2, 3], max_tokens=10)
    out0 = sched.schedule()
    out1 = sched.schedule()
    assert sched.finish_request("a", reason)
    assert sched.kv.num_used == len(sched.get_request("b").block_table)
    assert set(answer(sched, out0, {})) == {"b"}
    assert set(answer(sched, out1, {})) == {"b"}
    sched.abort("b")
    assert sched.kv.num_free == 8


def test_a_reused_request_id_does_not_receive_the_old_requests_tokens():
    sched = make()
    sched.add_request("a", [1, 2, 3], max_tokens=10)
    out0 = sched.schedule()
    sched.abort("a")
    sched.add_request("a", [4, 5], max_tokens=10)
    ups = answer(sched, out0, {"a": 99})
    assert ups == {} and sched.get_request("a").output_token_ids == []


def test_preempted_with_a_token_in_flight_waits_for_it_then_recomputes_with_it():
    sched = make(num_blocks=3, block_size=4, max_num_batched_tokens=32)
    sched.add_request("old", [1, 2, 3, 4, 5], max_tokens=7)   # 12 tokens: all 3 blocks
    sched.add_request("new", [9, 9], max_tokens=6)
    new = sched.get_request("new")
    pending = None
    for _ in range(30):
        out = sched.schedule()
        if new.num_preemptions:
            break
        if pending is not None:
            answer(sched, pending, {}, default=11)
        pending = None if out.is_empty else out
    else:
        pytest.fail("no preemption happened")
    # Preempted while its newest token was in flight: not readmitted until that id is on the host.
    assert new.status.value == "waiting" and new.num_output_placeholders == 1
    assert "new" not in by_id(out)
    answer(sched, pending, {}, default=11)
    assert new.num_output_placeholders == 0
    known = list(new.prompt_token_ids) + new.output_token_ids
    pending = None if out.is_empty else out
    for _ in range(30):
        nxt = sched.schedule()
        if "new" in by_id(nxt):
            seq = by_id(nxt)["new"]
            assert seq.start_position == 0 and list(seq.token_ids) == known
            break
        if pending is not None:
            answer(sched, pending, {}, default=11)
        pending = None if nxt.is_empty else nxt
    else:
        pytest.fail("the preempted request was never readmitted")
