"""The paged KV cache's bookkeeping: which fixed-size blocks are free, which belong to whom.

Pure host-side accounting; the cache tensors themselves live with the runner, per layer shaped
[num_blocks, block_size, n_head_kv, head_dim]. A token at `position` of a sequence whose block table is
`table` has its K/V at flat slot `table[position // block_size] * block_size + position % block_size`.

Contract on reuse: a freed block may be handed out by the very next allocation, even while a step that
still writes to it is in flight on the device. That is safe because steps execute on the device in the
order they were scheduled and no owner ever reads a slot it did not write itself (no prefix sharing):
the stale write lands before the new owner's own write of the same slot.
"""
from __future__ import annotations

from collections import deque

from engine.model.arch import BLOCK_SIZE


class OutOfBlocks(Exception):
    """Internal signal: an allocation asked for more blocks than are free. The scheduler handles it."""


class KVBlockManager:
    """Free list of block ids 0..num_blocks-1. Allocation order is deterministic, which keeps schedules
    reproducible: the most recently freed blocks are handed out first (a stack), so a chat reuses the cache
    memory its earlier requests already touched. Handed out first-freed-first, every request took blocks
    never written before and the process grew by their pages (host memory on the CPU path: ~8.5 MiB per
    SmolLM2 request) until the whole cache had been written once."""

    def __init__(self, num_blocks: int, block_size: int = BLOCK_SIZE):
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"need num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self._free: list[int] = list(range(num_blocks - 1, -1, -1))    # popped from the end: 0, 1, 2, ...
        self._in_use: set[int] = set()

    @property
    def num_free(self) -> int:
        return len(self._free)

    @property
    def num_used(self) -> int:
        return len(self._in_use)

    def blocks_for(self, num_tokens: int) -> int:
        """How many blocks hold `num_tokens` tokens (ceil division)."""
        return -(-num_tokens // self.block_size)

    def tokens_fitting(self, table: list[int]) -> int:
        """How many tokens the blocks in `table` plus every free block could hold."""
        return (len(table) + self.num_free) * self.block_size

    def grow(self, table: list[int], num_tokens: int) -> None:
        """Append blocks to `table` (in place) until it holds `num_tokens` tokens.

        All or nothing: raises OutOfBlocks and leaves `table` untouched when there are not enough free.
        """
        missing = self.blocks_for(num_tokens) - len(table)
        if missing <= 0:
            return
        if missing > len(self._free):
            raise OutOfBlocks(f"need {missing} blocks, {len(self._free)} free")
        for _ in range(missing):
            block = self._free.pop()
            self._in_use.add(block)
            table.append(block)

    def free(self, table: list[int]) -> None:
        """Return every block of `table` to the free list and empty the table (in place); the next allocation
        takes them back in table order."""
        for block in reversed(table):
            if block not in self._in_use:
                raise RuntimeError(f"block {block} freed twice or never allocated")
            self._in_use.remove(block)
            self._free.append(block)
        table.clear()

    def slot(self, table: list[int], position: int) -> int:
        """The flat cache slot of the token at `position` in the sequence owning `table`."""
        return table[position // self.block_size] * self.block_size + position % self.block_size


class StateSlots:
    """Recurrent-state slots 0..n-1 beside the paged KV cache (hybrid models keep one conv + delta-rule state
    per running sequence in a slot; engine.model.step.KVCache). A running request holds exactly one: taken on
    admission, given back on finish, abort or preemption. The state needs no saving: a sequence's step at
    position 0 resets its slot, so a preempted request rebuilds it when its tokens are recomputed, and the
    same in-order argument as for blocks makes handing a slot to the next request at once safe.
    FIFO like the block free list, so schedules stay reproducible."""

    def __init__(self, n: int):
        self._free: deque[int] = deque(range(n))

    @property
    def num_free(self) -> int:
        return len(self._free)

    def take(self) -> int:
        if not self._free:
            raise OutOfBlocks("no free recurrent-state slot")
        return self._free.popleft()

    def give_back(self, slot: int) -> None:
        self._free.append(slot)
