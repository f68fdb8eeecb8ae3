"""Flatten a SchedulerOutput into the host arrays of one forward step (the runner uploads them).

Shapes (S sequences, T tokens in all, K placeholder tokens):
  token_ids        int32 [T]   all scheduled tokens, sequences concatenated in row order;
                               PLACEHOLDER_TOKEN_ID (-1) where the id must come from the device
  positions        int32 [T]   position of each token in its sequence
  slot_mapping     int64 [T]   flat KV slot = block_id * block_size + position % block_size
  query_start_loc  int32 [S+1] sequence s owns tokens query_start_loc[s] : query_start_loc[s+1]
  seq_lens         int32 [S]   context length of each sequence after this step
  block_tables     int32 [S, max_blocks]  each request's blocks, padded with 0 (never read past seq_len)
  prev_token_dst   int32 [K]   indices into token_ids to fill on the device ...
  prev_token_src   int32 [K]   ... from these rows of the previous step's sampled ids [S_prev]
  sample_rows      bool  [S]   rows whose sampled id is a real output (False: mid-prompt chunk)
  state_slots      int32 [S]   each sequence's recurrent-state slot (hybrid models; engine.model.step)
The forward returns logits for the last token of each sequence: index query_start_loc[1:] - 1.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from engine.core.sched_types import PLACEHOLDER_TOKEN_ID, SchedulerOutput


@dataclass(frozen=True)
class StepBatch:
    step_id: int
    prev_step_id: int | None
    token_ids: np.ndarray
    positions: np.ndarray
    slot_mapping: np.ndarray
    query_start_loc: np.ndarray
    seq_lens: np.ndarray
    block_tables: np.ndarray
    prev_token_dst: np.ndarray
    prev_token_src: np.ndarray
    sample_rows: np.ndarray
    state_slots: np.ndarray = None

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def logits_indices(self) -> np.ndarray:
        """int32 [S]: index in [T] of each sequence's last token (where its logits come from)."""
        return self.query_start_loc[1:] - 1


def build_step_input(out: SchedulerOutput, block_size: int, max_blocks: int | None = None) -> StepBatch:
    """`max_blocks` fixes the block table width (e.g. ceil(max_model_len / block_size) for a static
    shape); by default it is the longest table in this step."""
    seqs = out.seqs
    widest = max((len(s.block_table) for s in seqs), default=0)
    width = widest if max_blocks is None else max_blocks
    if widest > width:
        raise ValueError(f"a block table has {widest} blocks, wider than max_blocks={width}")

    S = len(seqs)
    lens = np.fromiter((len(s.token_ids) for s in seqs), np.int32, S)
    starts = np.fromiter((s.start_position for s in seqs), np.int32, S)
    query_start_loc = np.zeros(S + 1, dtype=np.int32)
    np.cumsum(lens, out=query_start_loc[1:])
    T = int(query_start_loc[-1])
    token_ids = np.fromiter(itertools.chain.from_iterable(s.token_ids for s in seqs), np.int32, T)
    row_of_token = np.repeat(np.arange(S), lens)
    # each sequence's positions start_position .. seq_len - 1, for all sequences at once
    positions = np.arange(T, dtype=np.int32) + (starts - query_start_loc[:-1])[row_of_token]

    block_tables = np.zeros((S, width), dtype=np.int32)
    for s in seqs:
        block_tables[s.row, :len(s.block_table)] = s.block_table
    block_of_token = block_tables[row_of_token, positions // block_size].astype(np.int64)
    slot_mapping = block_of_token * block_size + positions % block_size

    last_token = query_start_loc[1:].tolist()
    dst = [last_token[s.row] - 1 for s in seqs if s.prev_row is not None]
    src = [s.prev_row for s in seqs if s.prev_row is not None]
    assert (token_ids[dst] == PLACEHOLDER_TOKEN_ID).all()
    return StepBatch(
        step_id=out.step_id, prev_step_id=out.prev_step_id,
        token_ids=token_ids, positions=positions, slot_mapping=slot_mapping,
        query_start_loc=query_start_loc, seq_lens=starts + lens,
        block_tables=block_tables,
        prev_token_dst=np.array(dst, dtype=np.int32), prev_token_src=np.array(src, dtype=np.int32),
        sample_rows=np.array([s.samples for s in seqs], dtype=bool),
        state_slots=np.array([s.state_slot for s in seqs], dtype=np.int32),
    )
