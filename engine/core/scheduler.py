"""Continuous-batching scheduler with chunked prefill, KV block accounting and async scheduling.

Pure Python over plain dataclasses; knows nothing of devices. Single-threaded: the engine thread calls
every method (aborts from other threads are drained by the core and arrive here as `abort()`).

Policy, per step (token budget B = max_num_batched_tokens):
1. Running requests, oldest first. A request that only needs one token (a decode) gets it; a request
   still prefilling gets min(rest of its known tokens, what is left of B after reserving one token for
   every running decode not yet visited). So decodes are never starved by a long prompt, and a prompt
   longer than B is prefilled over several steps (chunked prefill). While any running request decodes,
   the step's prefill chunks together take at most `prefill_beside_decodes` tokens (where set): a device
   whose long steps would make every decoding request wait seconds between tokens prefills in shorter
   chunks while others decode, and in whole ones when it is alone.
2. KV blocks are allocated as each slice is scheduled. When they run out, a prefill chunk is first
   shrunk to what fits; if nothing fits, the NEWEST running request is preempted: its blocks are freed,
   its num_computed_tokens reset, and it goes back to the waiting queue in arrival order, to be
   recomputed from its known ids later (its output so far is kept). If the newest is the request being
   scheduled, it preempts itself.
3. Waiting requests are admitted strictly FCFS (the head blocks the rest: nobody overtakes), while
   fewer than max_num_seqs run, budget is left, nothing was preempted this step, and the free blocks
   hold the head's whole known sequence plus one token (so admission does not immediately thrash).
Running and waiting are kept in arrival order, so the oldest request always has priority and
eventually finishes (add_request refuses what could not fit even alone): no request starves.

Async scheduling: step N+1 may be scheduled before step N's sampled ids are known here. A request
whose newest token is such a placeholder (num_output_placeholders == 1, sampled by the step scheduled
just before) is scheduled with PLACEHOLDER_TOKEN_ID and `prev_row`; the runner copies the id on the
device. When step N's ids arrive, `update_from_output` appends them and checks stop conditions; a
request finished there has its speculative step N+1 token discarded when step N+1's output arrives.
In sync mode (async_scheduling False) a request with a token in flight is simply not scheduled.
"""
from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from engine.api import FinishReason
from engine.core.kv_blocks import KVBlockManager, StateSlots
from engine.core.request_state import InFlightSample, RequestState, RequestStatus
from engine.core.sched_types import (
    PLACEHOLDER_TOKEN_ID,
    ScheduledSeq,
    SchedulerConfig,
    SchedulerOutput,
    StepOutput,
    TokenUpdate,
)
from engine.errors import ContextOverflowError


@dataclass
class _StepRecord:
    """A scheduled step whose output has not come back yet. `requests[row]` is the request of that row
    (the object, not the id: a finished request's rows are skipped even if its id is reused)."""

    step_id: int
    requests: list[RequestState]
    samples: list[bool]


class Scheduler:
    def __init__(self, config: SchedulerConfig, kv: KVBlockManager):
        self.config = config
        self.kv = kv
        self.state_slots = StateSlots(config.max_num_seqs)   # one per running request (hybrid models)
        self.requests: dict[str, RequestState] = {}   # unfinished requests by id
        self.waiting: list[RequestState] = []         # arrival order (preempted ones keep theirs)
        self.running: list[RequestState] = []         # arrival order
        self._in_flight: deque[_StepRecord] = deque()  # scheduled steps awaiting output, oldest first
        self._next_step_id = 0
        self._next_arrival = 0
        self._finished_since_last_step: list[str] = []

    # ---- requests in and out -------------------------------------------------------------------

    def add_request(self, request_id: str, prompt_token_ids: Iterable[int], max_tokens: int,
                    stop_token_ids: Iterable[int] = (), params: object = None) -> RequestState:
        """Queue a request (FCFS). Raises ContextOverflowError when it could never run to its end."""
        prompt = tuple(int(t) for t in prompt_token_ids)
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if not prompt:
            raise ValueError("empty prompt")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        limit = self.config.max_model_len
        if len(prompt) >= limit:
            raise ContextOverflowError(
                f"The prompt has {len(prompt)} tokens but the context holds {limit}; "
                "shorten the conversation or load the model with a longer context.")
        longest = min(len(prompt) + max_tokens, limit)
        capacity = self.kv.num_blocks * self.kv.block_size
        if longest > capacity:
            raise ContextOverflowError(
                f"This request may reach {longest} tokens but the KV cache holds {capacity}; "
                "lower max_tokens or give the KV cache more memory.")
        req = RequestState(request_id=request_id, prompt_token_ids=prompt, max_tokens=max_tokens,
                           stop_token_ids=frozenset(int(t) for t in stop_token_ids),
                           arrival=self._next_arrival, params=params)
        self._next_arrival += 1
        self.requests[request_id] = req
        self.waiting.append(req)
        return req

    def finish_request(self, request_id: str, reason: FinishReason) -> bool:
        """End a request now (stop string seen by the caller, error, abort). Frees its blocks; output of
        it still in flight is ignored when it arrives. False if the id is unknown or already finished."""
        req = self.requests.get(request_id)
        if req is None:
            return False
        self._finish(req, reason)
        return True

    def abort(self, request_id: str) -> bool:
        return self.finish_request(request_id, "abort")

    def get_request(self, request_id: str) -> RequestState | None:
        return self.requests.get(request_id)

    @property
    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    @property
    def num_steps_in_flight(self) -> int:
        return len(self._in_flight)

    # ---- one step ------------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Plan the next step. An empty output (nothing schedulable) consumes no step id and need not be
        executed; the caller should then deliver in-flight outputs (or wait for requests)."""
        step_id = self._next_step_id
        budget = self.config.max_num_batched_tokens
        seqs: list[ScheduledSeq] = []
        records: list[RequestState] = []

        candidates = [r for r in self.running if self._can_schedule(r, step_id)]
        pending_decodes = {r.request_id for r in candidates if self._tokens_wanted(r) == 1}
        prefill_left = budget
        if pending_decodes and self.config.prefill_beside_decodes is not None:
            prefill_left = self.config.prefill_beside_decodes
        preempted_any = False
        for req in candidates:
            if req.status is not RequestStatus.RUNNING:
                continue                                   # preempted earlier in this step
            wanted = self._tokens_wanted(req)
            if wanted == 1:
                pending_decodes.discard(req.request_id)
                n = 1
            else:
                n = min(wanted, budget - len(pending_decodes), prefill_left)
            if n <= 0:
                continue
            n, victims = self._allocate_or_preempt(req, n, may_shrink=wanted > 1)
            for victim in victims:
                pending_decodes.discard(victim.request_id)
            preempted_any |= bool(victims)
            if n == 0:
                break                                      # req preempted itself: it was the newest
            seqs.append(self._slice(req, n, step_id, row=len(seqs)))
            records.append(req)
            budget -= n
            if wanted > 1:
                prefill_left -= n

        while (self.waiting and min(budget, prefill_left) > 0 and not preempted_any
               and len(self.running) < self.config.max_num_seqs):
            req = self.waiting[0]
            if req.num_output_placeholders:
                break              # preempted while its token was in flight: wait for the id
            if self.kv.blocks_for(req.num_tokens + 1) > self.kv.num_free:
                break              # not enough KV for its prefill: admit nobody until blocks free
            n = min(req.num_tokens, budget, prefill_left)
            self.kv.grow(req.block_table, n)
            self.waiting.pop(0)
            req.state_slot = self.state_slots.take()      # running <= max_num_seqs = slots: never empty
            req.status = RequestStatus.RUNNING
            bisect.insort(self.running, req, key=lambda r: r.arrival)
            seqs.append(self._slice(req, n, step_id, row=len(seqs)))
            records.append(req)
            budget -= n
            prefill_left -= n

        if not seqs:
            return SchedulerOutput(step_id=step_id, seqs=(), prev_step_id=None)
        self._next_step_id += 1
        self._in_flight.append(_StepRecord(step_id, records, [s.samples for s in seqs]))
        finished = tuple(self._finished_since_last_step)
        self._finished_since_last_step.clear()
        uses_prev = any(s.prev_row is not None for s in seqs)
        return SchedulerOutput(step_id=step_id, seqs=tuple(seqs),
                               prev_step_id=step_id - 1 if uses_prev else None,
                               finished_request_ids=finished)

    def update_from_output(self, output: StepOutput) -> list[TokenUpdate]:
        """Take the host ids of the oldest step in flight: append them, check stop conditions, finish
        (and free) what is done. Outputs must arrive in step order, each exactly once."""
        if not self._in_flight or self._in_flight[0].step_id != output.step_id:
            expected = self._in_flight[0].step_id if self._in_flight else None
            raise ValueError(f"output for step {output.step_id} arrived, expected step {expected}")
        record = self._in_flight.popleft()
        if len(output.sampled_token_ids) < len(record.requests):
            raise ValueError(f"step {output.step_id}: {len(output.sampled_token_ids)} sampled ids "
                             f"for {len(record.requests)} rows")
        updates: list[TokenUpdate] = []
        for row, (req, samples) in enumerate(zip(record.requests, record.samples, strict=True)):
            if not samples or req.is_finished:
                continue                 # prefill chunk, or a speculative token of a finished request
            token = int(output.sampled_token_ids[row])
            req.num_output_placeholders -= 1
            req.output_token_ids.append(token)
            reason = self._stop_reason(req, token)
            if reason is not None:
                self._finish(req, reason)
            updates.append(TokenUpdate(req.request_id, token, reason))
        return updates

    def fail_step(self, step_id: int) -> list[str]:
        """The oldest step in flight failed on the device: forget it and return the ids of the unfinished
        requests it carried. The caller finishes them (reason "error"); others are untouched."""
        if not self._in_flight or self._in_flight[0].step_id != step_id:
            raise ValueError(f"step {step_id} is not the oldest step in flight")
        record = self._in_flight.popleft()
        return [r.request_id for r in dict.fromkeys(record.requests) if not r.is_finished]

    # ---- internals -----------------------------------------------------------------------------

    def _tokens_wanted(self, req: RequestState) -> int:
        return req.num_tokens_with_placeholders - req.num_computed_tokens

    def _can_schedule(self, req: RequestState, step_id: int) -> bool:
        if req.num_outputs_with_placeholders >= req.max_tokens:
            return False                       # its last token is already in flight
        if req.num_tokens_with_placeholders >= self.config.max_model_len:
            return False
        if req.num_output_placeholders == 0:
            return True
        # Async only: feed the one in-flight token from the device, if the step just before sampled it.
        return (self.config.async_scheduling and req.num_output_placeholders == 1
                and req.num_computed_tokens == req.num_tokens
                and req.last_in_flight is not None and req.last_in_flight.step_id == step_id - 1)

    def _allocate_or_preempt(self, req: RequestState, n: int, *, may_shrink: bool
                             ) -> tuple[int, list[RequestState]]:
        """Give `req` blocks for n more tokens. Returns (tokens granted, requests preempted); 0 tokens
        means `req` itself was preempted. Victims are always newer than `req`, so not yet scheduled."""
        victims: list[RequestState] = []
        while True:
            needed = req.num_computed_tokens + n
            if self.kv.blocks_for(needed) - len(req.block_table) <= self.kv.num_free:
                self.kv.grow(req.block_table, needed)
                return n, victims
            if may_shrink:
                fitting = self.kv.tokens_fitting(req.block_table) - req.num_computed_tokens
                if fitting >= 1:
                    n = fitting
                    continue
            victim = self.running[-1]
            self._preempt(victim)
            victims.append(victim)
            if victim is req:
                return 0, victims

    def _slice(self, req: RequestState, n: int, step_id: int, row: int) -> ScheduledSeq:
        """Record that `req` computes n tokens in this step, and describe them for the runner."""
        start = req.num_computed_tokens
        ids: list[int] = []
        prev_row = None
        for position in range(start, start + n):
            token = req.token_id_at(position)
            if token is None:          # the in-flight token: only ever the last one of a decode
                assert position == start + n - 1 and req.last_in_flight is not None
                token, prev_row = PLACEHOLDER_TOKEN_ID, req.last_in_flight.row
            ids.append(token)
        req.num_computed_tokens += n
        samples = req.num_computed_tokens == req.num_tokens_with_placeholders
        if samples:
            req.num_output_placeholders += 1
            req.last_in_flight = InFlightSample(step_id, row)
        return ScheduledSeq(request_id=req.request_id, row=row, start_position=start,
                            token_ids=tuple(ids), block_table=tuple(req.block_table),
                            samples=samples, prev_row=prev_row, params=req.params,
                            state_slot=req.state_slot)

    def _stop_reason(self, req: RequestState, token: int) -> FinishReason | None:
        if token in req.stop_token_ids:
            return "stop"
        if len(req.output_token_ids) >= req.max_tokens or req.num_tokens >= self.config.max_model_len:
            return "length"
        return None

    def _release_state(self, req: RequestState) -> None:
        if req.state_slot is not None:
            self.state_slots.give_back(req.state_slot)
            req.state_slot = None

    def _preempt(self, req: RequestState) -> None:
        self.running.remove(req)
        self.kv.free(req.block_table)
        self._release_state(req)          # dropped, rebuilt from position 0 on resume (like the KV)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        req.status = RequestStatus.WAITING
        bisect.insort(self.waiting, req, key=lambda r: r.arrival)

    def _finish(self, req: RequestState, reason: FinishReason) -> None:
        if req.status is RequestStatus.RUNNING:
            self.running.remove(req)
        elif req.status is RequestStatus.WAITING:
            self.waiting.remove(req)
        self.kv.free(req.block_table)
        self._release_state(req)
        req.status = RequestStatus.FINISHED
        req.finish_reason = reason
        del self.requests[req.request_id]
        self._finished_since_last_step.append(req.request_id)
