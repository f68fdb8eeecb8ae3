"""SentencePiece-style tokenization from scores (`tokenizer.ggml.model == "llama"`: gemma 3, Llama 2).

This is llama.cpp's SPM algorithm in Python: start from one symbol per character, repeatedly merge
the adjacent pair whose concatenation is a vocabulary token with the highest score (ties: leftmost),
then emit each final symbol's id, or its UTF-8 bytes as <0xXX> byte tokens when it is not a token.

Why not the Rust `tokenizers`: the file has no merges, only scores. A `tokenizers` BPE would need merges
derived from the scores (every split of every one of gemma's 262,144 tokens, ranked) - seconds of
Python at load time, far over the ~1.3 s budget for opening gemma - and BPE's pair ranks only
approximate "highest-scoring merged token", so ids could differ from llama.cpp. Building this
tokenizer is one dict of the vocabulary (~30 ms); encoding costs ~5 us per character.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence


def byte_token_ids(token_to_id: Mapping[str, int], unk_id: int | None) -> list[int]:
    """id for each byte value: <0xXX>, else the single character, else unk (llama.cpp's fallback)."""
    ids = []
    for b in range(256):
        token = token_to_id.get(f"<0x{b:02X}>")
        if token is None:
            token = token_to_id.get(chr(b)) if b < 128 else None
        ids.append(token if token is not None else (unk_id if unk_id is not None else 0))
    return ids


def spm_encode(text: str, lookup: Callable[[str], int | None], scores: Sequence[float],
               byte_ids: Sequence[int], seen: dict[str, int | None] | None = None) -> list[int]:
    """Encode one raw fragment whose spaces are already escaped to U+2581. `lookup`: text -> id or None
    (the TokenIndex's `get`, ~1 us a call); `seen`: its answers so far, shared by the fragments of one text
    (a text repeats its words)."""
    symbols = list(text)                 # symbol i's current text; "" once merged into its left
    n = len(symbols)
    if n == 0:
        return []
    ids: list[int | None] = [None] * n   # symbol i's id once a merge made it (a merged symbol is a token)
    nxt = list(range(1, n + 1))
    nxt[-1] = -1
    prev = list(range(-1, n - 1))
    heap: list[tuple[float, int, int, int, int]] = []   # (-score, left, right, merged length, id)
    if seen is None:
        seen = {}

    def push(left: int, right: int) -> None:
        if left < 0 or right < 0:
            return
        merged = symbols[left] + symbols[right]
        token = seen.get(merged, -1)
        if token == -1:
            token = seen[merged] = lookup(merged)
        if token is not None:            # (left, right, length) decide the order before the id is compared
            heapq.heappush(heap, (-scores[token], left, right, len(merged), token))

    for i in range(n - 1):
        push(i, i + 1)
    while heap:
        _, left, right, size, token = heapq.heappop(heap)
        left_text, right_text = symbols[left], symbols[right]
        if not left_text or not right_text or len(left_text) + len(right_text) != size:
            continue                     # stale: one side changed since this pair was queued
        symbols[left] = left_text + right_text
        symbols[right] = ""
        ids[left] = token
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prev[nxt[right]] = left
        push(prev[left], left)
        push(left, nxt[left])

    out: list[int] = []
    i = 0
    while i >= 0:
        token = ids[i] if ids[i] is not None else lookup(symbols[i])
        if token is not None:
            out.append(token)
        else:
            out.extend(byte_ids[b] for b in symbols[i].encode("utf-8"))
        i = nxt[i]
    return out
