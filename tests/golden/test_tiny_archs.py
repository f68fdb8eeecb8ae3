"""Our CPU forward on tiny random-weight GGUFs of every architecture we run vs transformers (float32).

The files and goldens in tests/golden/data/ come from tests/tools/make_tiny_models.py (see the README
there): transformers ran on the weights dequantized from each file, so an exact float32 engine must agree
to rounding. Random weights make every tensor, norm offset, rope convention and mask matter: a wrong
convention moves the logits by whole units, not thousandths.

Needs only the committed files (no real models, no torch), so it is not marked `golden`.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from engine.model.loader import load_model
from engine.model.step import SequenceBlocks, StepInput

DATA = Path(__file__).resolve().parent / "data"
NAMES = sorted(p.name.removesuffix(".golden.npz") for p in DATA.glob("tiny-*.golden.npz"))
ATOL = 2e-4             # float32 vs float32: observed differences are 5e-6..3e-5
CLEAR_MARGIN = 0.1      # greedy ids must agree on every step whose golden margin is at least this


def test_every_architecture_and_quant_type_is_covered():
    archs = {n.split("-")[1] for n in NAMES}
    assert archs == {"llama", "qwen2", "qwen3", "gemma3", "qwen35", "qwen3moe", "gptoss"}
    assert len(NAMES) == 14


_cache: dict[str, tuple] = {}


def _model_and_golden(name: str):
    if name not in _cache:
        _cache.clear()                       # one model at a time (they are tiny, but stay tidy)
        path = DATA / f"{name}.gguf"
        golden = dict(np.load(DATA / f"{name}.golden.npz"))
        assert str(golden["gguf_sha256"]) == hashlib.sha256(path.read_bytes()).hexdigest(), \
            "golden file is stale: rerun tests/tools/make_tiny_models.py"
        _cache[name] = (load_model(path), golden)
    return _cache[name]


def _single_sequence_step(ids, start: int, blocks: list[int], block_size: int,
                          logits_at: np.ndarray | None = None) -> StepInput:
    """Step appending `ids` at positions start.. to one sequence whose logical block j is physical
    block blocks[j] (a deliberately scrambled table exercises the paging)."""
    positions = np.arange(start, start + len(ids), dtype=np.int32)
    table = np.asarray(blocks, dtype=np.int32)
    slots = table[positions // block_size].astype(np.int64) * block_size + positions % block_size
    return StepInput(token_ids=np.asarray(ids, dtype=np.int32), positions=positions, slot_mapping=slots,
                     query_start_loc=np.array([0, len(ids)], dtype=np.int32),
                     seq_lens=np.array([start + len(ids)], dtype=np.int32), block_tables=table[None, :],
                     logits_indices=logits_at)


@pytest.mark.parametrize("name", NAMES)
def test_prompt_logits_match_transformers(name):
    lm, g = _model_and_golden(name)
    prompt = g["prompt_ids"]
    T = len(prompt)
    n_blocks = -(-T // 16)
    kv = lm.model.new_kv_cache(num_blocks=n_blocks, block_size=16)
    every_position = np.arange(T, dtype=np.int32)
    logits = lm.model.forward(_single_sequence_step(prompt, 0, list(range(n_blocks)), 16, every_position), kv)
    assert logits.shape == (T, lm.config.vocab_size) and logits.dtype == np.float32
    last = g["prompt_logits_last"]
    np.testing.assert_allclose(logits[-len(last):], last, atol=ATOL, rtol=0)
    # every earlier position's top-1 too, unless our own top-2 are too close to call
    top2 = np.sort(logits, axis=-1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 10 * ATOL
    assert np.array_equal(logits.argmax(-1)[clear], g["prompt_argmax"][clear])


@pytest.mark.parametrize("name", NAMES)
def test_greedy_decode_through_the_kv_cache_matches_transformers(name):
    lm, g = _model_and_golden(name)
    prompt, ref_ids, ref_logits = g["prompt_ids"].tolist(), g["greedy_ids"], g["greedy_logits"]
    kv = lm.model.new_kv_cache(num_blocks=-(-(len(prompt) + len(ref_ids)) // 16), block_size=16)
    seq = SequenceBlocks(kv)
    logits = lm.model.forward(seq.step(prompt), kv)[0]
    generated = []
    for step in range(len(ref_ids)):
        np.testing.assert_allclose(logits, ref_logits[step], atol=ATOL, rtol=0, err_msg=f"decode step {step}")
        generated.append(int(np.argmax(logits)))
        if g["greedy_margins"][step] >= CLEAR_MARGIN:
            assert generated[-1] == ref_ids[step], f"step {step}"
        logits = lm.model.forward(seq.step([generated[-1]]), kv)[0]


@pytest.mark.parametrize("name", NAMES)
def test_chunked_prefill_into_scrambled_small_blocks_matches(name):
    """Prompt in uneven chunks crossing 4-token blocks placed out of order in the cache: every chunk
    attends to earlier chunks only through the paged cache (and on gemma3's sliding layers, only to the
    last 8 positions of it)."""
    lm, g = _model_and_golden(name)
    prompt = g["prompt_ids"]
    bs, T = 4, len(prompt)
    n_blocks = -(-T // bs)
    blocks = np.random.default_rng(0).permutation(n_blocks).tolist()
    kv = lm.model.new_kv_cache(num_blocks=n_blocks, block_size=bs)
    start = 0
    for n in (5, 1, 9, T - 15):
        ids = prompt[start:start + n]
        logits = lm.model.forward(_single_sequence_step(ids, start, blocks, bs,
                                                        np.arange(n, dtype=np.int32)), kv)
        start += n
    last = g["prompt_logits_last"]
    np.testing.assert_allclose(logits[-len(last):], last, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", NAMES)
def test_two_sequences_in_one_step_do_not_see_each_other(name):
    """A batch of the full prompt and a copy of its first 12 tokens, each in its own blocks: the long one
    gives the golden logits; the short one's last logits equal a run of that prefix alone."""
    lm, g = _model_and_golden(name)
    prompt = g["prompt_ids"]
    bs, T, P = 8, len(prompt), 12
    n_long = -(-T // bs)
    kv = lm.model.new_kv_cache(num_blocks=n_long + 2, block_size=bs, state_slots=2)
    order = np.random.default_rng(1).permutation(n_long + 2).tolist()
    long_blocks, short_blocks = order[:n_long], order[n_long:]
    pos = np.concatenate([np.arange(T), np.arange(P)]).astype(np.int32)
    tables = np.array([long_blocks, short_blocks + [0] * (n_long - 2)], dtype=np.int32)
    seq_of = np.array([0] * T + [1] * P)
    slots = tables[seq_of, pos // bs].astype(np.int64) * bs + pos % bs
    step = StepInput(token_ids=np.concatenate([prompt, prompt[:P]]).astype(np.int32), positions=pos,
                     slot_mapping=slots, query_start_loc=np.array([0, T, T + P], dtype=np.int32),
                     seq_lens=np.array([T, P], dtype=np.int32), block_tables=tables)
    both = lm.model.forward(step, kv)
    np.testing.assert_allclose(both[0], g["prompt_logits_last"][-1], atol=ATOL, rtol=0)

    alone_kv = lm.model.new_kv_cache(num_blocks=2, block_size=bs)
    alone = lm.model.forward(SequenceBlocks(alone_kv).step(prompt[:P].tolist()), alone_kv)[0]
    np.testing.assert_allclose(both[1], alone, atol=ATOL, rtol=0)   # batching changes rounding only
