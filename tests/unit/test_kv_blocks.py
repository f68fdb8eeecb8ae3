"""KV block accounting: allocation as sequences grow, all-or-nothing, freeing, slot arithmetic."""
import pytest

from engine.core.kv_blocks import KVBlockManager, OutOfBlocks


def test_grow_allocates_ceil_of_tokens_and_only_the_missing_blocks():
    kv = KVBlockManager(num_blocks=8, block_size=16)
    table: list[int] = []
    kv.grow(table, 1)
    assert table == [0] and kv.num_free == 7
    kv.grow(table, 16)                  # still fits the first block
    assert table == [0]
    kv.grow(table, 17)
    assert table == [0, 1]
    kv.grow(table, 48)
    assert table == [0, 1, 2] and kv.num_used == 3


def test_grow_is_all_or_nothing_when_blocks_run_out():
    kv = KVBlockManager(num_blocks=3, block_size=4)
    a: list[int] = []
    kv.grow(a, 8)
    b: list[int] = []
    with pytest.raises(OutOfBlocks):
        kv.grow(b, 9)                   # needs 3, one free
    assert b == [] and kv.num_free == 1
    kv.grow(b, 4)
    assert b == [2] and kv.num_free == 0


def test_freed_blocks_are_handed_out_again_before_untouched_ones():
    """A chat's next request reuses the blocks (and so the memory pages) the previous one wrote, in order."""
    kv = KVBlockManager(num_blocks=8, block_size=2)
    a, b, c = [], [], []
    kv.grow(a, 6)
    kv.grow(b, 2)
    kv.free(a)
    kv.grow(c, 5)
    assert a == [] and b == [3] and c == [0, 1, 2]
    kv.grow(c, 9)                       # past the reused ones: the untouched blocks, in id order
    assert c == [0, 1, 2, 4, 5] and kv.num_free == 2


def test_free_returns_blocks_and_reuses_them():
    kv = KVBlockManager(num_blocks=4, block_size=2)
    a, b = [], []
    kv.grow(a, 4)
    kv.grow(b, 4)
    kv.free(a)
    assert a == [] and kv.num_free == 2
    c: list[int] = []
    kv.grow(c, 4)
    assert c == [0, 1]
    kv.free(b)
    kv.free(c)
    assert kv.num_free == 4 and kv.num_used == 0


def test_double_free_is_caught():
    kv = KVBlockManager(num_blocks=2, block_size=2)
    a: list[int] = []
    kv.grow(a, 2)
    stale = list(a)
    kv.free(a)
    with pytest.raises(RuntimeError, match="freed twice"):
        kv.free(stale)


def test_slot_maps_position_through_the_block_table():
    kv = KVBlockManager(num_blocks=10, block_size=16)
    table = [7, 2, 9]
    assert kv.slot(table, 0) == 7 * 16
    assert kv.slot(table, 15) == 7 * 16 + 15
    assert kv.slot(table, 16) == 2 * 16
    assert kv.slot(table, 40) == 9 * 16 + 8


def test_tokens_fitting_counts_own_and_free_blocks():
    kv = KVBlockManager(num_blocks=5, block_size=4)
    a: list[int] = []
    kv.grow(a, 5)
    assert kv.tokens_fitting(a) == (2 + 3) * 4
    assert kv.blocks_for(0) == 0 and kv.blocks_for(4) == 1 and kv.blocks_for(5) == 2


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        KVBlockManager(0, 16)
    with pytest.raises(ValueError):
        KVBlockManager(4, 0)
