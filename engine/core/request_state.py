"""One request as the scheduler sees it: token ids, how far the KV cache has got, what is in flight.

Token accounting (L = number of tokens whose ids the host knows = prompt + outputs received so far):
- `num_computed_tokens`: tokens whose K/V is written, or will be by a step already scheduled. Advanced
  at schedule time, reset to 0 on preemption (the KV is recomputed from the known ids).
- `num_output_placeholders`: output tokens that a scheduled step will sample but whose ids have not
  reached the host yet. With async scheduling a request can be scheduled while its newest token is
  still such a placeholder: the runner feeds it from the previous step's device-resident sampled ids.
- Invariant: num_computed_tokens <= num_tokens_with_placeholders = L + num_output_placeholders.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from engine.api import FinishReason


class RequestStatus(enum.Enum):
    WAITING = "waiting"        # never admitted, or preempted and waiting to be recomputed
    RUNNING = "running"        # holds KV blocks and is scheduled each step it can be
    FINISHED = "finished"      # blocks freed; any output still in flight for it is discarded


@dataclass(frozen=True)
class InFlightSample:
    """Where a placeholder's id lives on the device: row `row` of step `step_id`'s sampled ids [S]."""

    step_id: int
    row: int


@dataclass(eq=False)
class RequestState:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    stop_token_ids: frozenset[int]          # EOS and other stop ids: finish with reason "stop"
    arrival: int                            # FCFS order; kept across preemptions
    params: Any = None                      # the runner's sampling parameters; opaque here
    output_token_ids: list[int] = field(default_factory=list)
    num_computed_tokens: int = 0
    num_output_placeholders: int = 0
    block_table: list[int] = field(default_factory=list)
    state_slot: int | None = None            # recurrent-state slot while running (engine.core.kv_blocks.StateSlots)
    status: RequestStatus = RequestStatus.WAITING
    finish_reason: FinishReason | None = None
    num_preemptions: int = 0
    # The newest placeholder's device location; meaningful while num_output_placeholders > 0.
    last_in_flight: InFlightSample | None = None

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        """Tokens whose ids the host knows: prompt + outputs received."""
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def num_tokens_with_placeholders(self) -> int:
        return self.num_tokens + self.num_output_placeholders

    @property
    def num_outputs_with_placeholders(self) -> int:
        return len(self.output_token_ids) + self.num_output_placeholders

    def token_id_at(self, position: int) -> int | None:
        """The id at `position` if the host knows it, else None (a placeholder)."""
        n_prompt = len(self.prompt_token_ids)
        if position < n_prompt:
            return self.prompt_token_ids[position]
        if position - n_prompt < len(self.output_token_ids):
            return self.output_token_ids[position - n_prompt]
        return None

    @property
    def is_finished(self) -> bool:
        return self.status is RequestStatus.FINISHED
