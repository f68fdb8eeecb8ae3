"""A Qwen3.5 file with the real 248k vocabulary and chat template that says one scripted reply (a "tape").

Random weights never write a tool call, so a test of tool-call parsing needs a model that does, through the
real engine. This one is the tiny qwen35 model (tests/golden/data/tiny-qwen35-f32.gguf) with every layer's
output projection zeroed (ssm_out, attn_output, ffn_down): the residual stream stays the token's embedding,
so the next token depends on the current token only (a bigram model). The tape's tokens are all distinct;
each one's embedding is a row of an orthonormal basis, and the output row of its successor is that same row,
so greedy decoding walks the tape: every logit is 0 except the successor's (about 8 * OUTPUT_GAIN).
Everything around the model is real: the template renders the tools, the engine generates the ids, the
tokenizer decodes them and the server parses what comes out.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen35_vocab import N_VOCAB, real_vocab_writer, reference_tokenizer  # noqa: E402

ZEROED = ("ssm_out.weight", "attn_output.weight", "ffn_down.weight")
OUTPUT_GAIN = 5.0
CONTEXT = 4096


SEARCH_BUDGET = 100_000


def distinct_tokens(text: str, ranks: dict[bytes, int], used: set[int]) -> list[int]:
    """Ids whose bytes concatenate to `text`, none in `used` and none twice (depth-first, longest first,
    within SEARCH_BUDGET steps). Repetitive text has none: a bigram tape cannot say a token twice."""
    data = text.encode("utf-8")
    longest = max(len(b) for b in ranks)
    steps = [0]

    def walk(i: int, taken: set[int]) -> list[int] | None:
        if i == len(data):
            return []
        steps[0] += 1
        if steps[0] > SEARCH_BUDGET:
            return None
        for n in range(min(longest, len(data) - i), 0, -1):
            rank = ranks.get(data[i:i + n])
            if rank is None or rank in taken:
                continue
            rest = walk(i + n, taken | {rank})
            if rest is not None:
                return [rank, *rest]
        return None

    ids = walk(0, set(used))
    if ids is None:
        raise ValueError(f"no tokenization of {text!r} with distinct tokens")
    return ids


def tape_ids(pieces: list[str | int], start: list[int], ref) -> list[int]:
    """The tape: `start` (ids the prompt may end with, each leading on), then `pieces` (text, or a special
    token's id) as distinct ids."""
    ranks: dict[bytes, int] = ref._mergeable_ranks
    ids = list(start)
    for piece in pieces:
        new = [piece] if isinstance(piece, int) else distinct_tokens(piece, ranks, set(ids))
        if set(new) & set(ids):
            raise ValueError(f"{piece!r} repeats a token of the tape")
        ids += new
    return ids


def tape_matrices(tape: list[int], n_vocab: int, dim: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """(token embedding, output matrix), each [n_vocab, dim] float32, of a bigram model walking `tape`: token
    k's embedding is basis row k (times 4), and so is its successor's output row (times OUTPUT_GAIN)."""
    if len(tape) - 1 > dim or len(set(tape)) != len(tape):
        raise ValueError(f"a tape is at most {dim + 1} distinct tokens (one basis row of {dim} each but the last)")
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0].T.astype(np.float32)     # orthonormal rows
    emb = rng.normal(0, 0.5, (n_vocab, dim)).astype(np.float32)
    out = np.zeros((n_vocab, dim), np.float32)
    for k, (token, successor) in enumerate(zip(tape[:-1], tape[1:], strict=True)):
        emb[token] = basis[k] * 4.0
        out[successor] = basis[k] * OUTPUT_GAIN
    return emb, out


def write_tape_model(path: Path, tape: list[int], ref=None) -> Path:
    """Writes the model: greedy decoding from any id of `tape` continues along `tape` (the last id should be
    the end-of-turn token, which stops generation)."""
    import gguf

    ref = ref or reference_tokenizer()
    w, src = real_vocab_writer(path, ref, {"qwen35.context_length": CONTEXT})
    emb, out = tape_matrices(tape, N_VOCAB)
    q8 = gguf.GGMLQuantizationType.Q8_0
    for t in src.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        if t.name == "token_embd.weight":
            w.add_tensor(t.name, gguf.quants.quantize(emb, q8), raw_dtype=q8)
            w.add_tensor("output.weight", gguf.quants.quantize(out, q8), raw_dtype=q8)
        elif t.name.endswith(ZEROED):
            w.add_tensor(t.name, np.zeros(shape, np.float32))
        elif t.name == "output_norm.weight":
            w.add_tensor(t.name, np.ones(shape, np.float32))       # stored as the multiplier (1 + w)
        else:
            w.add_tensor(t.name, np.asarray(t.data, np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
