"""EngineCore: the scheduler, the runner and the steps in flight. The engine thread owns it.

One `step()`: launch the next step if the pipeline has room (schedule -> execute, non-blocking), then,
when the pipeline is full or nothing could be launched, take the OLDEST step's ids from the host side
of its readback, update the scheduler and hand each token to its Generation (detokenize, stop strings,
events). Pipeline depth: 1 in sync mode (each step is read back before the next is scheduled), 2 with
async scheduling (step N+1 is on the device, fed from step N's device ids, while the host processes
step N). A request the host finishes at step N (stop string, abort) has its step-N+1 token discarded
by the scheduler; its blocks are freed at once (safe: steps run in order on the device).

Failures: a step that fails to launch or to read back fails the unfinished requests it carried (reason
"error", with the exception's text); the others and the engine carry on. After a failure nothing new
is launched until every older step was processed, so no step reads ids from a step that never ran.
"""
from __future__ import annotations

from collections import deque

from engine.core.runner import ModelRunner, PendingStep, RowError
from engine.core.scheduler import Scheduler
from engine.generation import Generation


class EngineCore:
    def __init__(self, scheduler: Scheduler, runner: ModelRunner):
        self.scheduler = scheduler
        self.runner = runner
        self.depth = 2 if scheduler.config.async_scheduling else 1
        self.in_flight: deque[PendingStep] = deque()    # launched steps, oldest first
        self.generations: dict[str, Generation] = {}    # unfinished requests by id
        self._prefill_chunks: dict[int, list[tuple[str, int]]] = {}   # step id -> (request, tokens cached
                                                                       # after it) for chunks that do not sample

    @property
    def async_scheduling(self) -> bool:
        return self.depth > 1

    @property
    def has_work(self) -> bool:
        return bool(self.generations) or bool(self.in_flight)

    def add_request(self, generation: Generation, prompt_ids: list[int], stop_ids) -> None:
        """Raises (ContextOverflowError, ValueError) when the scheduler refuses it; nothing is kept then."""
        self.scheduler.add_request(generation.request_id, prompt_ids, generation.params.max_tokens,
                                   stop_ids, params=generation.params)
        self.generations[generation.request_id] = generation

    def abort(self, request_id: str) -> bool:
        generation = self.generations.pop(request_id, None)
        if generation is None:
            return False
        self.scheduler.abort(request_id)
        generation.finish("abort")
        return True

    def abort_all(self) -> None:
        for request_id in list(self.generations):
            self.abort(request_id)
        self.drain()

    def step(self) -> bool:
        """Returns False when there was nothing to launch and nothing in flight (idle, or stalled)."""
        launched = False
        if len(self.in_flight) < self.depth and not any(p.failed for p in self.in_flight):
            plan = self.scheduler.schedule()
            if not plan.is_empty:
                self.in_flight.append(self.runner.execute(plan))      # non-blocking
                chunks = [(s.request_id, s.seq_len) for s in plan.seqs if not s.samples]
                if chunks:
                    self._prefill_chunks[plan.step_id] = chunks
                launched = True
        if self.in_flight and (not launched or len(self.in_flight) >= self.depth):
            self._process(self.in_flight.popleft())
            return True
        return launched

    def drain(self) -> None:
        """Process every step in flight (after aborts, before unloading)."""
        while self.in_flight:
            self._process(self.in_flight.popleft())

    def close(self) -> None:
        self.abort_all()
        self.runner.close()

    # ---- the host side of one step ----------------------------------------------------------------
    def _process(self, pending: PendingStep) -> None:
        chunks = self._prefill_chunks.pop(pending.step_id, ())
        try:
            output = pending.get_output()             # blocks on this step's ready event only
        except Exception as e:                        # noqa: BLE001 - the step's requests fail, not the engine
            self._fail(pending.step_id, e)
            return
        for request_id, cached in chunks:
            generation = self.generations.get(request_id)
            if generation is not None:
                generation.on_prompt_progress(cached)
        for update in self.scheduler.update_from_output(output):
            generation = self.generations.get(update.request_id)
            if generation is None:
                continue
            extra = pending.extras.get(update.request_id)
            if isinstance(extra, RowError):
                self._finish(update.request_id, "error", extra.message)
                continue
            if update.request_id in pending.extras:
                generation.first_top_logits = pending.extras[update.request_id]
            try:
                stopped_here = generation.on_token(update.token_id, update.finish_reason)
            except Exception as e:                    # noqa: BLE001 - e.g. a bad stop string: this request only
                self._finish(update.request_id, "error", f"Generation failed: {type(e).__name__}: {e}")
                continue
            if stopped_here:
                self.scheduler.finish_request(update.request_id, "stop")
            if generation.finished:
                del self.generations[update.request_id]

    def _fail(self, step_id: int, error: BaseException) -> None:
        message = (f"Generation failed: step {step_id} could not run on "
                   f"{self.runner.backend.name}: {type(error).__name__}: {error}")
        for request_id in self.scheduler.fail_step(step_id):
            self._finish(request_id, "error", message)

    def _finish(self, request_id: str, reason, error: str | None = None) -> None:
        self.scheduler.finish_request(request_id, reason)
        generation = self.generations.pop(request_id, None)
        if generation is not None:
            generation.finish(reason, error=error)
