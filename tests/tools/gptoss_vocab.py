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

O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"   # tiktoken's cache key


def _byte_to_unicode() -> dict[int, str]:
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), 256)]
    extra = iter(range(256, 512))
    return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}


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
    b2u = _byte_to_unicode()
    n_vocab = max(max(ranks.values()), max(specials.values())) + 1
    text_of = {rank: "".join(b2u[b] for b in token) for token, rank in ranks.items()}
    merges = sorted((rank, ranks[token[:i]], ranks[token[i:]]) for token, rank in ranks.items()
                    for i in range(1, len(token)) if token[:i] in ranks and token[i:] in ranks)
    tokens, types = [f"[PAD{i}]" for i in range(n_vocab)], [5] * n_vocab
    for rank, text in text_of.items():
        tokens[rank], types[rank] = text, 1
    for text, i in specials.items():
        tokens[i], types[i] = text, 3
    return {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-4o", "tokenizer.ggml.tokens": tokens,
            "tokenizer.ggml.token_type": types,
            "tokenizer.ggml.merges": [f"{text_of[a]} {text_of[b]}" for _, a, b in merges],
            "tokenizer.ggml.bos_token_id": specials["<|startoftext|>"],
            "tokenizer.ggml.eos_token_id": specials["<|return|>"],
            "tokenizer.ggml.padding_token_id": specials["<|endoftext|>"],
            "tokenizer.ggml.add_bos_token": False}


GOLDEN_DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
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
    src = gguf.GGUFReader(GOLDEN_DATA / "tiny-gptoss-q8_0.gguf")
    w = gguf.GGUFWriter(path, "gpt-oss")
    for key, field in src.fields.items():
        if key.startswith(("GGUF.", "tokenizer.")) or key == "general.architecture":
            continue
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        value = 4096 if key == "gpt-oss.context_length" else field.contents()
        w.add_key_value(key, value, field.types[0], sub)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-4o")
    w.add_token_list(meta["tokenizer.ggml.tokens"])
    w.add_token_types(meta["tokenizer.ggml.token_type"])
    w.add_token_merges(meta["tokenizer.ggml.merges"])
    w.add_bos_token_id(meta["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(meta["tokenizer.ggml.eos_token_id"])
    w.add_pad_token_id(meta["tokenizer.ggml.padding_token_id"])
    w.add_add_bos_token(False)
    w.add_chat_template(HARMONY_TEMPLATE.read_text(encoding="utf-8"))
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
