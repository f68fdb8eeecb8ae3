"""gpt-oss's tokenizer (o200k_harmony) offline: tiktoken's own encoding as the reference, and the GGUF
tokenizer block (as metadata) llama.cpp's converter writes for it.

tiktoken downloads o200k_base's ranks at run time, which this project cannot; the `bpe-openai` package ships
the same file (its sha256 is the one tiktoken pins), so it is put where tiktoken's cache looks and
`tiktoken.get_encoding("o200k_harmony")` builds the official encoding with its specials, untouched.

GGUF block: token id = rank, text = the bytes in GPT-2's byte-to-unicode alphabet; merges: every split of a
token into two shorter tokens, ranked by the token's rank (tiktoken merges the pair whose concatenation has
the lowest rank); the specials at their ids as control tokens; pre-tokenizer "gpt-4o".
"""
from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
from importlib import resources
from pathlib import Path

from tiktoken_gguf import GOLDEN_DATA, ranks_block, writer_with_vocab

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"   # tiktoken's cache key


def reference_encoding():
    """tiktoken's o200k_harmony, its ranks from bpe-openai's copy (no network)."""
    import tiktoken

    data = gzip.decompress((resources.files("bpe_openai.data") / "o200k_base.tiktoken.gz").read_bytes())
    cache = Path(tempfile.mkdtemp(prefix="tiktoken-"))
    (cache / hashlib.sha1(O200K_URL.encode()).hexdigest()).write_bytes(data)
    old = os.environ.get("TIKTOKEN_CACHE_DIR")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(cache)
    try:
        return tiktoken.get_encoding("o200k_harmony")
    finally:
        if old is None:
            os.environ.pop("TIKTOKEN_CACHE_DIR")
        else:
            os.environ["TIKTOKEN_CACHE_DIR"] = old


def tokenizer_metadata(enc) -> dict:
    ranks: dict[bytes, int] = enc._mergeable_ranks
    specials: dict[str, int] = enc._special_tokens
    n_vocab = max(max(ranks.values()), max(specials.values())) + 1
    tokens, types, merges = ranks_block(ranks, n_vocab)
    for text, i in specials.items():
        tokens[i], types[i] = text, 3
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": merges,
            "tokenizer.ggml.bos_token_id": specials["<|startoftext|>"],
            "tokenizer.ggml.eos_token_id": specials["<|return|>"],
            "tokenizer.ggml.padding_token_id": specials["<|endoftext|>"],
            "tokenizer.ggml.add_bos_token": False}


HARMONY_TEMPLATE = GOLDEN_DATA / "harmony-test-template.jinja"
# What a bigram tape must zero so the residual stream stays the token's embedding (tests/tools/tape_model.py)
_ZEROED = ("attn_output.weight", "attn_output.bias", "ffn_down_exps.weight", "ffn_down_exps.bias")


def write_harmony_tape_model(path: Path, tape: list[int], enc) -> Path:
    """The tiny gpt-oss model (tests/golden/data/tiny-gptoss-q8_0.gguf) with the REAL o200k_harmony vocabulary
    of `enc`, the harmony test template, and its layers' outputs zeroed so that greedy decoding walks `tape`
    (tests/tools/tape_model.py explains the bigram construction)."""
    import gguf
    import numpy as np
    from tape_model import tape_matrices

    meta = tokenizer_metadata(enc)
    n_vocab = len(meta["tokenizer.ggml.tokens"])
    w, src = writer_with_vocab(path, GOLDEN_DATA / "tiny-gptoss-q8_0.gguf", meta,
                               HARMONY_TEMPLATE.read_text(encoding="utf-8"), {"gpt-oss.context_length": 4096})
    emb, out = tape_matrices(tape, n_vocab)
    for t in src.tensors:
        if t.name in ("token_embd.weight", "output.weight"):         # F16: quick to write, exact enough
            w.add_tensor(t.name, (emb if t.name == "token_embd.weight" else out).astype(np.float16))
        elif t.name == "output_norm.weight":
            w.add_tensor(t.name, np.ones(t.data.shape, np.float32))
        elif t.tensor_type == gguf.GGMLQuantizationType.F32:
            data = np.zeros_like(t.data) if t.name.endswith(_ZEROED) else t.data
            w.add_tensor(t.name, np.asarray(data, np.float32))
        else:                                     # quantized (Q8_0, MXFP4): the bytes as they are, or zeros
            data = np.zeros_like(t.data) if t.name.endswith(_ZEROED) else t.data
            w.add_tensor(t.name, np.asarray(data, np.uint8), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
