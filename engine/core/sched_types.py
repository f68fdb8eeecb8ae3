"""What crosses the scheduler's boundary: its config, one step's plan, the runner's answer, the updates.

Flow per step:  scheduler.schedule() -> SchedulerOutput -> runner (build_step_input, forward, sample on
the device) -> StepOutput (host ids, once the readback completed) -> scheduler.update_from_output()
-> [TokenUpdate] for the core to detokenize and stream.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.api import FinishReason

# Stands in token_ids for an id the host does not know yet: the runner copies it on the device from
# row `prev_row` of the previous step's sampled ids.
PLACEHOLDER_TOKEN_ID = -1


@dataclass(frozen=True)
class SchedulerConfig:
    max_num_seqs: int = 8               # sequences in one step (and running at once)
    max_num_batched_tokens: int = 512   # token budget of one step, prefill chunks and decodes together
    max_model_len: int = 2048           # prompt + output never exceed this; reaching it finishes "length"
    async_scheduling: bool = False      # allow scheduling a request whose newest token is still in flight
    # prompt tokens (all prefill chunks together) a step takes while running requests decode; None: the whole
    # budget. A step's length is what every decoding request waits between two tokens.
    prefill_beside_decodes: int | None = None

    def __post_init__(self):
        beside = self.prefill_beside_decodes
        if self.max_num_seqs < 1 or self.max_model_len < 2 or (beside is not None and beside < 1):
            raise ValueError(f"bad scheduler limits: {self}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            # Every running decode must fit in one step, else a decode could starve behind prefills.
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be >= max_num_seqs "
                f"({self.max_num_seqs}) so that every running decode fits in one step"
            )


@dataclass(frozen=True)
class ScheduledSeq:
    """One sequence's slice of a step: tokens at positions start_position .. start_position+n-1."""

    request_id: str
    row: int                         # index among the step's sequences; row of the logits and sampled ids
    start_position: int              # tokens already in the KV cache before this step
    token_ids: tuple[int, ...]       # [n]; PLACEHOLDER_TOKEN_ID where the id comes from the device
    block_table: tuple[int, ...]     # the request's whole block table, long enough for seq_len tokens
    samples: bool                    # True: the sampled id is a real output. False: a prefill chunk
                                     # that does not reach the end of the known tokens; ignore its sample
    prev_row: int | None = None      # set iff token_ids[-1] is a placeholder: its row in the previous step
    params: Any = None               # the request's sampling parameters, as given to add_request
    state_slot: int = 0              # the request's recurrent-state slot (hybrid models)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def seq_len(self) -> int:
        """Context length after this step (what attention spans for the last token)."""
        return self.start_position + len(self.token_ids)


@dataclass(frozen=True)
class SchedulerOutput:
    step_id: int                                  # consecutive over non-empty steps, from 0
    seqs: tuple[ScheduledSeq, ...]                # rows, in order
    prev_step_id: int | None                      # the step whose device ids placeholder rows read
    finished_request_ids: tuple[str, ...] = ()    # finished/aborted since the last step: drop their state

    @property
    def num_tokens(self) -> int:
        return sum(s.num_tokens for s in self.seqs)

    @property
    def is_empty(self) -> bool:
        return not self.seqs


@dataclass(frozen=True)
class StepOutput:
    """The runner's answer for one step, once the sampled ids are on the host."""

    step_id: int
    sampled_token_ids: Sequence[int]   # [S], row-aligned with SchedulerOutput.seqs; rows with
                                       # samples=False are ignored (any value)


@dataclass(frozen=True)
class TokenUpdate:
    """One new output token of one request. When `finish_reason` is set the request is over and its KV
    blocks are already free; a stop id that ended it is included in the token (the core hides it)."""

    request_id: str
    token_id: int
    finish_reason: FinishReason | None = None
