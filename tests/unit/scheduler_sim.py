"""A fake paged "model" and the sync/async step loops, for driving the real Scheduler in tests.

The fake model is honest about the KV contract: it writes each token's id, position and owner into a
flat slot array at `slot_mapping`, then "attends" by reading positions 0..seq_len-1 back through the
block table and hashing the ids it finds. The next token is a deterministic function of the whole
context, so any wrong position, slot, block table, stale block or wrong placeholder copy changes the
output, and `reference_generate` (no scheduler at all) is the oracle.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from engine.core.sched_types import SchedulerConfig, SchedulerOutput, StepOutput
from engine.core.scheduler import Scheduler
from engine.core.step_batch import build_step_input

VOCAB = 1000
EOS = 0


def next_token(context, eos_every: int = 29) -> int:
    """Deterministic 'model': crc32 of the context ids. About one context in `eos_every` yields EOS."""
    h = zlib.crc32(np.asarray(context, dtype=np.int64).tobytes())
    if eos_every and h % eos_every == 0:
        return EOS
    return 1 + h % (VOCAB - 1)


def reference_generate(prompt, max_tokens: int, max_model_len: int, eos_every: int = 29
                       ) -> tuple[list[int], str]:
    """What any correct schedule must produce for one request: (output ids, finish reason)."""
    context = list(prompt)
    out: list[int] = []
    while True:
        token = next_token(context, eos_every)
        out.append(token)
        context.append(token)
        if token == EOS:
            return out, "stop"
        if len(out) >= max_tokens or len(context) >= max_model_len:
            return out, "length"


class FakePagedRunner:
    """Executes a SchedulerOutput against a fake flat KV cache, checking the step against the limits."""

    def __init__(self, config: SchedulerConfig, num_blocks: int, block_size: int, eos_every: int = 29):
        self.config = config
        self.block_size = block_size
        self.eos_every = eos_every
        n_slots = num_blocks * block_size
        self.kv_token = np.full(n_slots, -100, dtype=np.int64)
        self.kv_position = np.full(n_slots, -100, dtype=np.int64)
        self.kv_owner = np.full(n_slots, -100, dtype=np.int64)
        self._owner_ids: dict[str, int] = {}
        self.prev_sampled: np.ndarray | None = None   # the "device-resident" sampled ids of the last step
        self.prev_step_id: int | None = None
        self.steps: list[SchedulerOutput] = []

    def execute(self, out: SchedulerOutput) -> StepOutput:
        assert not out.is_empty
        batch = build_step_input(out, self.block_size)
        assert batch.num_seqs <= self.config.max_num_seqs
        assert batch.num_tokens <= self.config.max_num_batched_tokens
        assert len({s.request_id for s in out.seqs}) == batch.num_seqs, "a request twice in one step"
        assert int(batch.positions.max()) < self.config.max_model_len
        if self.prev_step_id is not None:
            assert out.step_id == self.prev_step_id + 1, "steps must be consecutive"

        ids = batch.token_ids.astype(np.int64)
        if len(batch.prev_token_dst):
            assert batch.prev_step_id == self.prev_step_id
            ids[batch.prev_token_dst] = self.prev_sampled[batch.prev_token_src]
        assert (ids >= 0).all(), "an unknown id reached the model"

        owners = np.repeat([self._owner(s.request_id) for s in out.seqs], np.diff(batch.query_start_loc))
        self.kv_token[batch.slot_mapping] = ids
        self.kv_position[batch.slot_mapping] = batch.positions
        self.kv_owner[batch.slot_mapping] = owners

        sampled = np.full(batch.num_seqs, -1, dtype=np.int64)
        bs = self.block_size
        for s, seq in enumerate(out.seqs):
            p = np.arange(batch.seq_lens[s])
            slots = batch.block_tables[s, p // bs].astype(np.int64) * bs + p % bs
            assert (self.kv_position[slots] == p).all(), f"{seq.request_id}: KV positions out of place"
            assert (self.kv_owner[slots] == self._owner(seq.request_id)).all(), \
                f"{seq.request_id}: read a KV slot written by another request"
            sampled[s] = next_token(self.kv_token[slots], self.eos_every)
        self.prev_sampled, self.prev_step_id = sampled, out.step_id
        self.steps.append(out)
        return StepOutput(out.step_id, sampled.tolist())

    def _owner(self, request_id: str) -> int:
        return self._owner_ids.setdefault(request_id, len(self._owner_ids))


@dataclass
class Results:
    tokens: dict[str, list[int]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def take(self, updates) -> None:
        for u in updates:
            assert u.request_id not in self.reasons, f"{u.request_id}: token after finish"
            self.tokens.setdefault(u.request_id, []).append(u.token_id)
            if u.finish_reason is not None:
                self.reasons[u.request_id] = u.finish_reason


def run_to_completion(sched: Scheduler, runner: FakePagedRunner, *, async_steps: bool,
                      arrivals: dict[int, list[tuple]] | None = None,
                      aborts: dict[int, list[str]] | None = None, max_steps: int = 100_000,
                      observe=None) -> Results:
    """Drive the scheduler like the engine core would. `arrivals[i]`: add_request argument tuples added
    before loop iteration i; `aborts[i]`: ids aborted before iteration i.

    async_steps=True: schedule and launch step N+1, THEN deliver step N's output (one step in flight
    while scheduling). False: deliver each step's output before scheduling the next.
    `observe(sched, out)` is called right after each schedule()."""
    results = Results()
    arrivals, aborts = arrivals or {}, aborts or {}
    last_event = max([*arrivals, *aborts], default=0)
    pending: StepOutput | None = None
    for i in range(max_steps):
        for args in arrivals.get(i, ()):
            sched.add_request(*args)
        for rid in aborts.get(i, ()):
            if sched.abort(rid):
                results.reasons[rid] = "abort"
        out = sched.schedule()
        if observe is not None:
            observe(sched, out)
        launched = None if out.is_empty else runner.execute(out)
        delivered = pending if async_steps else launched
        if delivered is not None:
            results.take(sched.update_from_output(delivered))
        pending = launched if async_steps else None
        if i >= last_event and not sched.has_unfinished_requests and pending is None:
            break
        if i >= last_event and launched is None and delivered is None:
            raise AssertionError(f"scheduler stalled at iteration {i}")
    else:
        raise AssertionError("did not finish")
    assert sched.num_steps_in_flight == 0
    return results
