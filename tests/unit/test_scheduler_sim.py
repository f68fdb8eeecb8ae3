"""Randomized simulations: the real Scheduler driven like the engine core, against a fake paged model
whose next token is a hash of the context it reads back through the block tables.

Every schedule (sync or async, batched or one at a time, with preemption, chunking, arrivals over time
and aborts) must give each request exactly the ids of `reference_generate`, and leave no block behind."""
import random

import pytest
from scheduler_sim import EOS, FakePagedRunner, reference_generate, run_to_completion

from engine.core.kv_blocks import KVBlockManager
from engine.core.sched_types import SchedulerConfig
from engine.core.scheduler import Scheduler


def random_workload(rng: random.Random):
    block_size = rng.choice([1, 2, 4, 16])
    max_num_seqs = rng.randint(1, 8)
    config = dict(max_num_seqs=max_num_seqs,
                  max_num_batched_tokens=rng.randint(max_num_seqs, 64),
                  max_model_len=rng.randint(8, 160))
    requests = []
    for i in range(rng.randint(1, 16)):
        n_prompt = rng.randint(1, min(70, config["max_model_len"] - 1))
        prompt = [rng.randrange(1, 1000) for _ in range(n_prompt)]
        requests.append((f"r{i}", prompt, rng.randint(1, 40), [EOS]))
    longest = max(min(len(p) + m, config["max_model_len"]) for _, p, m, _ in requests)
    # From "just the longest request fits" (heavy preemption) to plenty of room.
    num_blocks = -(-longest // block_size) + rng.choice([0, 1, 3, 50])
    arrivals: dict[int, list] = {}
    for req in requests:
        arrivals.setdefault(rng.choice([0, 0, rng.randint(0, 40)]), []).append(req)
    aborts: dict[int, list] = {}
    for rid, *_ in rng.sample(requests, k=rng.randint(0, 2)):
        aborts.setdefault(rng.randint(0, 60), []).append(rid)
    config["prefill_beside_decodes"] = rng.choice([None, None, 1, 3, 8])     # drawn last: the rest as before
    return config, block_size, num_blocks, requests, arrivals, aborts


def simulate(config, block_size, num_blocks, *, async_steps, **kw):
    """Run the workload to the end; assert nothing leaked. Returns (Results, FakePagedRunner)."""
    cfg = SchedulerConfig(async_scheduling=async_steps, **config)
    sched = Scheduler(cfg, KVBlockManager(num_blocks, block_size))
    runner = FakePagedRunner(cfg, num_blocks, block_size)
    results = run_to_completion(sched, runner, async_steps=async_steps, **kw)
    assert sched.kv.num_free == num_blocks and sched.kv.num_used == 0, "KV blocks leaked"
    assert not sched.running and not sched.waiting and not sched.requests
    return results, runner


@pytest.mark.parametrize("seed", range(40))
def test_random_schedules_match_the_reference_in_sync_and_async(seed):
    rng = random.Random(seed)
    config, block_size, num_blocks, requests, arrivals, aborts = random_workload(rng)
    by_mode = {}
    for async_steps in (False, True):
        results, _ = simulate(config, block_size, num_blocks, async_steps=async_steps,
                              arrivals=arrivals, aborts=aborts)
        for rid, prompt, max_tokens, _ in requests:
            want_ids, want_reason = reference_generate(prompt, max_tokens, config["max_model_len"])
            got = results.tokens.get(rid, [])
            if results.reasons[rid] == "abort":
                assert got == want_ids[:len(got)], f"{rid}: aborted output is not a prefix"
            else:
                assert (got, results.reasons[rid]) == (want_ids, want_reason), rid
        by_mode[async_steps] = results
    aborted = {rid for rid, r in by_mode[True].reasons.items() if r == "abort"}
    aborted |= {rid for rid, r in by_mode[False].reasons.items() if r == "abort"}
    for rid, *_ in requests:
        if rid not in aborted:
            assert by_mode[True].tokens[rid] == by_mode[False].tokens[rid]


@pytest.mark.parametrize("seed", range(8))
def test_batched_async_equals_one_request_at_a_time(seed):
    rng = random.Random(1000 + seed)
    config, block_size, _, requests, _, _ = random_workload(rng)
    config["max_num_seqs"] = max(2, config["max_num_seqs"])
    config["max_num_batched_tokens"] = max(config["max_num_seqs"], config["max_num_batched_tokens"])
    requests += [("extra", [5, 6, 7], 40, [])]
    num_blocks = 2000 // block_size          # room for everyone: real batching
    batched, runner = simulate(config, block_size, num_blocks, async_steps=True,
                               arrivals={0: requests})
    assert max(len(s.seqs) for s in runner.steps) >= 2
    for req in requests:
        alone, _ = simulate(config, block_size, num_blocks, async_steps=False, arrivals={0: [req]})
        assert alone.tokens[req[0]] == batched.tokens[req[0]]
        assert alone.reasons[req[0]] == batched.reasons[req[0]]


def test_async_mode_really_overlaps_steps():
    """Guard against the async loop silently degrading to sync: most decode rows use placeholders."""
    config = dict(max_num_seqs=4, max_num_batched_tokens=32, max_model_len=128)
    requests = [(f"r{i}", [i + 1] * (5 + i), 30, []) for i in range(4)]
    _, runner = simulate(config, 4, 200, async_steps=True, arrivals={0: requests})
    decode_rows = [s for step in runner.steps for s in step.seqs if s.num_tokens == 1]
    placeholder_rows = [s for s in decode_rows if s.prev_row is not None]
    assert len(placeholder_rows) == len(decode_rows) > 100


@pytest.mark.parametrize("async_steps", [False, True])
def test_nobody_starves_under_a_steady_stream_of_arrivals(async_steps):
    """A long prompt arrives first, then a new request every iteration for 300 iterations, with a
    cache small enough to force preemption. Admission stays FCFS and every request finishes."""
    config = dict(max_num_seqs=4, max_num_batched_tokens=16, max_model_len=256)
    rng = random.Random(7)
    long_req = ("long", [rng.randrange(1, 1000) for _ in range(150)], 60, [])
    arrivals = {0: [long_req]}
    for i in range(1, 300):
        prompt = [rng.randrange(1, 1000) for _ in range(rng.randint(1, 40))]
        arrivals[i] = [(f"s{i}", prompt, rng.randint(1, 20), [])]
    overtakes = []
    preemptions = set()

    def no_overtaking(sched, out):
        # Every admission (a slice from position 0) must be of the oldest request not running.
        for seq in out.seqs:
            if seq.start_position == 0:
                admitted = sched.get_request(seq.request_id)
                older_waiting = [w.request_id for w in sched.waiting if w.arrival < admitted.arrival]
                if older_waiting:
                    overtakes.append((seq.request_id, older_waiting))
        preemptions.update(r.request_id for r in sched.waiting if r.num_preemptions)

    results, runner = simulate(config, 4, 60, async_steps=async_steps, arrivals=arrivals,
                               observe=no_overtaking)
    assert not overtakes
    assert preemptions, "the scenario should force preemption"
    assert len(results.reasons) == 300 and set(results.reasons.values()) == {"length"}
    first_scheduled: dict[str, int] = {}
    for step in runner.steps:
        for s in step.seqs:
            first_scheduled.setdefault(s.request_id, step.step_id)
    order = sorted(first_scheduled, key=first_scheduled.get)
    arrival_index = {"long": 0, **{f"s{i}": i for i in range(1, 300)}}
    firsts = [first_scheduled[r] for r in sorted(first_scheduled, key=arrival_index.get)]
    assert firsts == sorted(firsts), "a later request was admitted before an earlier one"
    assert order[0] == "long"
    long_done = next(i for i, step in enumerate(runner.steps)
                     if any(s.request_id == "long" for s in step.seqs)
                     and all(s.request_id != "long" for t in runner.steps[i + 1:] for s in t.seqs))
    assert long_done < 200, "the long request was starved"
