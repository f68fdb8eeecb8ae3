"""Splitting raw text around special tokens, the way llama.cpp's `tokenizer_st_partition` does.

Special tokens are taken longest first; each one is searched left to right in every raw fragment
left by the longer ones. This order matters: a regex alternation would pick the leftmost match instead
and differ from llama.cpp where two special texts overlap.
"""
from __future__ import annotations

Fragment = str | int   # raw text still to be tokenized, or a token id already decided


def partition(text: str, table: list[tuple[str, int, bool]], parse_special: bool) -> list[Fragment]:
    """Split `text` into raw-text fragments and special-token ids.

    `table` is `vocab.special_token_table` (longest first). Control tokens take part only when
    `parse_special` is true; user-defined tokens always do (llama.cpp behaviour).
    """
    fragments: list[Fragment] = [text]
    for special, token_id, is_control in table:
        if is_control and not parse_special:
            continue
        if special not in text:      # cheap pre-filter: fragments are substrings of text
            continue
        fragments = _split_all(fragments, special, token_id)
    return [f for f in fragments if f != ""]


def _split_all(fragments: list[Fragment], special: str, token_id: int) -> list[Fragment]:
    out: list[Fragment] = []
    for fragment in fragments:
        if isinstance(fragment, int) or special not in fragment:
            out.append(fragment)
            continue
        start = 0
        while (found := fragment.find(special, start)) >= 0:
            if found > start:
                out.append(fragment[start:found])
            out.append(token_id)
            start = found + len(special)
        if start < len(fragment):
            out.append(fragment[start:])
    return out
