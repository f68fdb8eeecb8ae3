"""The step contract shared by every forward pass (CPU and GPU) and the scheduler.

One step runs S sequences together. Their new tokens (prompt chunks or one decode token each) are
concatenated into T tokens, so every weight is applied in one matmul over all T tokens.

Paged KV cache: per layer, `k[layer]` and `v[layer]` have shape [num_blocks, block_size, n_head_kv,
head_dim]. A token's K/V lives in the flat slot `block * block_size + offset`; a sequence's blocks are
listed, in position order, in its row of `block_tables`. Position p of sequence s lives in block
`block_tables[s, p // block_size]` at offset `p % block_size`.

Contract of `forward(step, kv) -> logits [S', vocab] float32` (S' = len(step.logits_indices)):
1. writes K/V of every token t into slot `slot_mapping[t]` of every layer (before attending), and
2. token t of sequence s attends to positions 0..positions[t] of s (causal), read through
   `block_tables[s]`; on sliding-window layers only to positions > positions[t] - sliding_window.
3. on linear-attention layers (hybrid models), sequence s reads and updates the recurrent state in slot
   `state_slots[s]`, which it resets to zero when its first token this step is at position 0.
`forward` reads only the StepInput fields below (plus `num_tokens`, `num_seqs`), so engine.core's
StepBatch (same names and shapes) can be passed as is once its placeholder ids are filled in.
The caller guarantees: tokens of a sequence are contiguous in query_start_loc order with consecutive
positions ending at seq_lens[s] - 1; every slot for positions < seq_lens[s] was written (now or earlier).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine.model.arch import BLOCK_SIZE, kv_bytes_per_token, recurrent_state_shapes
from engine.model.config import ModelConfig
from engine.model.host_pages import prefer_small_pages

DEFAULT_BLOCK_SIZE = BLOCK_SIZE


@dataclass
class KVCache:
    """Run state. Per attention layer K and V [num_blocks, block_size, n_kv, head_dim]; per linear-attention
    layer (hybrid models) the recurrent state of `state_slots` sequences: conv [slots, K-1, C] and delta
    [slots, Hv, Dk, Dv] (engine.model.arch.recurrent_state_shapes). Entries of the other kind are None."""

    k: list[np.ndarray | None]
    v: list[np.ndarray | None]
    block_size: int
    num_blocks: int = 0
    conv: list[np.ndarray | None] = field(default_factory=list)
    delta: list[np.ndarray | None] = field(default_factory=list)

    @property
    def state_slots(self) -> int:
        return next((a.shape[0] for a in self.conv if a is not None), 0)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (*self.k, *self.v, *self.conv, *self.delta) if a is not None)

    @staticmethod
    def allocate(config: ModelConfig, num_blocks: int, block_size: int = DEFAULT_BLOCK_SIZE,
                 dtype=np.float32, state_slots: int = 1) -> KVCache:
        shape = (num_blocks, block_size, config.n_head_kv, config.head_dim)
        conv_shape, delta_shape = recurrent_state_shapes(config)
        attn = [kind == "attention" for kind in config.layer_kinds]
        # 4 KiB pages: a cache sized for a whole context costs what has been written (engine.model.host_pages)
        return KVCache(k=[prefer_small_pages(np.zeros(shape, dtype)) if a else None for a in attn],
                       v=[prefer_small_pages(np.zeros(shape, dtype)) if a else None for a in attn],
                       block_size=block_size, num_blocks=num_blocks,
                       conv=[None if a else np.zeros((state_slots, *conv_shape), dtype) for a in attn],
                       delta=[None if a else np.zeros((state_slots, *delta_shape), dtype) for a in attn])

    @staticmethod
    def blocks_for(config: ModelConfig, max_bytes: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
        """How many float32 blocks fit in `max_bytes` (for sizing the cache against memory)."""
        per_block = block_size * kv_bytes_per_token(config, "cpu")
        return max(1, max_bytes // per_block)


@dataclass
class StepInput:
    token_ids: np.ndarray         # [T] int32: new tokens of all sequences, concatenated
    positions: np.ndarray         # [T] int32: position of each token in its sequence
    slot_mapping: np.ndarray      # [T] int64: flat KV slot where each token's K/V is written
    query_start_loc: np.ndarray   # [S+1] int32: tokens of sequence s are token_ids[qsl[s]:qsl[s+1]]
    seq_lens: np.ndarray          # [S] int32: context length of each sequence after this step
    block_tables: np.ndarray      # [S, max_blocks] int32: physical block of each logical block (pad: 0)
    logits_indices: np.ndarray = field(default=None)  # [S'] int32 into T; default: last token of each seq
    state_slots: np.ndarray = field(default=None)     # [S] int32 recurrent-state slot per seq; default 0..S-1

    def __post_init__(self):
        if self.logits_indices is None:
            self.logits_indices = (self.query_start_loc[1:] - 1).astype(np.int32)
        if self.state_slots is None:
            self.state_slots = np.arange(len(self.seq_lens), dtype=np.int32)

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_seqs(self) -> int:
        return len(self.seq_lens)


class SequenceBlocks:
    """Blocks of ONE sequence, allocated linearly from a private cache: the single-request path used
    before (and besides) the scheduler. Sequence position p lives in block p // block_size."""

    def __init__(self, kv: KVCache):
        self.kv = kv
        self.length = 0       # tokens already in the cache

    @property
    def capacity(self) -> int:
        return self.kv.num_blocks * self.kv.block_size

    def reset(self) -> None:
        self.length = 0

    def step(self, token_ids) -> StepInput:
        """StepInput that appends `token_ids` to the sequence; logits for its last token."""
        ids = np.asarray(token_ids, dtype=np.int32)
        n = len(ids)
        if n == 0:
            raise ValueError("a step needs at least one token")
        if self.length + n > self.capacity:
            raise ValueError(f"sequence of {self.length + n} tokens exceeds the cache ({self.capacity} tokens)")
        positions = np.arange(self.length, self.length + n, dtype=np.int32)
        self.length += n
        n_blocks = -(-self.length // self.kv.block_size)
        return StepInput(
            token_ids=ids,
            positions=positions,
            slot_mapping=positions.astype(np.int64),       # block b is physical block b: slot == position
            query_start_loc=np.array([0, n], dtype=np.int32),
            seq_lens=np.array([self.length], dtype=np.int32),
            block_tables=np.arange(n_blocks, dtype=np.int32)[None, :],
        )
