"""A tiktoken vocabulary as a GGUF tokenizer block, the way llama.cpp's converter writes one, and a writer
that puts such a block on a tiny model's layers. Shared by qwen35_vocab.py (Qwen3.5's 248k vocabulary) and
gptoss_vocab.py (o200k_harmony).

- token id = tiktoken rank; its text is the bytes in GPT-2's byte-to-unicode alphabet;
- merges: tiktoken merges the adjacent pair whose concatenation has the lowest rank, so every split of a
  token into two shorter tokens is a merge, ranked by the token's own rank (then by the parts' ranks).
"""
from __future__ import annotations

from pathlib import Path

GOLDEN_DATA = Path(__file__).resolve().parents[1] / "golden" / "data"   # the tiny models it builds on


def _byte_to_unicode() -> dict[int, str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


def ranks_block(ranks: dict[bytes, int], n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """(tokens, token types, merges) for `ranks`; ids without a rank are "[PAD{i}]" fillers (type 5, unused)
    for the caller to fill with its special tokens."""
    b2u = _byte_to_unicode()
    text_of = {rank: "".join(b2u[b] for b in token) for token, rank in ranks.items()}
    merges = sorted((rank, ranks[token[:i]], ranks[token[i:]]) for token, rank in ranks.items()
                    for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks)
    tokens, types = [f"[PAD{i}]" for i in range(n_vocab)], [5] * n_vocab
    for rank, text in text_of.items():
        tokens[rank], types[rank] = text, 1
    return tokens, types, [f"{text_of[a]} {text_of[b]}" for _, a, b in merges]


def writer_with_vocab(path: Path, source: Path, meta: dict, template: str, overrides: dict | None = None):
    """A GGUFWriter at `path` holding `source`'s metadata (`overrides`: key -> value instead) with the tokenizer
    block `meta` (tokenizer_metadata of qwen35_vocab / gptoss_vocab) and the chat `template`; the caller adds
    the tensors. Returns (writer, `source`'s GGUFReader, whose tensors the caller copies or replaces)."""
    import gguf

    src = gguf.GGUFReader(source)
    arch = src.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(path, arch)
    for key, field in src.fields.items():
        if key.startswith(("GGUF.", "tokenizer.")) or key == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, (overrides or {}).get(key, field.contents()), field.types[0], sub)
    w.add_tokenizer_model(meta["tokenizer.ggml.model"])
    w.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    w.add_token_merges(meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    w.add_pad_token_id(meta["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(meta["tokenizer.ggml.add_bos_token"])
    w.add_chat_template(template)
    return w, src
