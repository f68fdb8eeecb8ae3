"""Class 10 of SAFETY.md: hyperparameters in range, tensor shapes that match them, tokenizer arrays of
equal length, special token ids inside the vocabulary.

Architecture-neutral: each check runs only when the keys or tensors it concerns are present, using the
llama-family names (`{arch}.embedding_length`, `blk.N.attn_q.weight`, ...) that every GGUF converter
shares. A model the engine cannot run is the model code's business (UnsupportedModelError); here we
only refuse files that contradict themselves.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

import numpy as np

from engine.errors import InvalidModelError
from engine.gguf.strings import StringArray
from engine.gguf.tensors import TensorInfo

MAX_BLOCKS = 4096
MAX_EMBD = 1 << 20
MAX_HEADS = 1 << 14
MAX_CONTEXT = 1 << 24            # 16M tokens: far above any real model
_BLOCK_NAME = re.compile(r"blk\.(\d+)\.")
_SPECIAL_ID = re.compile(r"tokenizer\.ggml\.\w+_token_id")


def check_consistency(metadata: Mapping, tensors: Mapping[str, TensorInfo]) -> None:
    _check_tokenizer(metadata, tensors)
    arch = metadata.get("general.architecture")
    if arch is None:
        return
    if not isinstance(arch, str) or not arch:
        raise InvalidModelError(f"general.architecture is {arch!r}, not a name", field="general.architecture")
    _check_hparams(arch, metadata, tensors)


def _int(metadata: Mapping, key: str, low: int, high: int) -> int | None:
    """The key's value as an int in [low, high]; None if absent. A per-layer array is checked element-wise
    and gives None too (the shape checks below only use scalar values)."""
    if key not in metadata:
        return None
    value = metadata[key]
    values = value.tolist() if isinstance(value, np.ndarray) else [value]
    if not values or any(type(v) is not int or not low <= v <= high for v in values):
        raise InvalidModelError(f"{key} is {value!r}; it must be an integer from {low} to {high}", field=key)
    return values[0] if not isinstance(value, np.ndarray) else None


def _check_hparams(arch: str, metadata: Mapping, tensors: Mapping[str, TensorInfo]) -> None:
    has_attention = any(".attn_q." in n or ".attn_qkv." in n for n in tensors)
    head_low = 1 if has_attention else 0
    n_block = _int(metadata, f"{arch}.block_count", 1, MAX_BLOCKS)
    n_embd = _int(metadata, f"{arch}.embedding_length", 1, MAX_EMBD)
    _int(metadata, f"{arch}.context_length", 1, MAX_CONTEXT)
    _int(metadata, f"{arch}.feed_forward_length", 0, MAX_EMBD * 64)
    n_head = _int(metadata, f"{arch}.attention.head_count", head_low, MAX_HEADS)
    n_head_kv = _int(metadata, f"{arch}.attention.head_count_kv", head_low, MAX_HEADS)
    key_len = _int(metadata, f"{arch}.attention.key_length", 1, MAX_EMBD)
    value_len = _int(metadata, f"{arch}.attention.value_length", 1, MAX_EMBD)
    if n_head and n_head_kv and n_head % n_head_kv:
        raise InvalidModelError(f"head_count {n_head} is not a multiple of head_count_kv {n_head_kv}",
                                field=f"{arch}.attention.head_count_kv")
    if n_embd and n_head and key_len is None:
        if n_embd % n_head:
            raise InvalidModelError(f"embedding_length {n_embd} is not a multiple of head_count {n_head}",
                                    field=f"{arch}.attention.head_count")
        key_len = n_embd // n_head
    if value_len is None:
        value_len = key_len
    if n_block is not None:
        _check_block_indices(n_block, tensors)
    if n_embd is not None:
        _check_shapes(n_embd, n_head, n_head_kv, key_len, value_len, metadata, tensors)


def _check_block_indices(n_block: int, tensors: Mapping[str, TensorInfo]) -> None:
    for name in tensors:
        match = _BLOCK_NAME.match(name)
        if match and int(match.group(1)) >= n_block:
            raise InvalidModelError(f"tensor {name!r} belongs to block {match.group(1)} but the model has "
                                    f"{n_block} blocks", field=name)


def _check_shapes(n_embd, n_head, n_head_kv, key_len, value_len, metadata, tensors) -> None:
    """Compare ggml `ne` (ne[0] = input features) against what the hyperparameters imply."""
    n_vocab = len(metadata["tokenizer.ggml.tokens"]) if "tokenizer.ggml.tokens" in metadata else None
    expected: dict[str, tuple[int | None, ...]] = {
        "token_embd.weight": (n_embd, n_vocab),
        "output.weight": (n_embd, n_vocab),
        "output_norm.weight": (n_embd,),
    }
    for name, info in tensors.items():
        if name in expected:
            _expect(info, expected[name])
        elif name.endswith(".attn_norm.weight") or name.endswith(".ffn_norm.weight"):
            _expect(info, (n_embd,))
        elif name.endswith(".attn_q.weight"):
            q_dim = n_head * key_len if n_head and key_len else None
            if q_dim and len(info.ne) == 2 and info.ne[1] == 2 * q_dim:
                q_dim *= 2                      # q and an output gate per head (qwen35's gated attention)
            _expect(info, (n_embd, q_dim))
        elif name.endswith(".attn_k.weight"):
            _expect(info, (n_embd, n_head_kv * key_len if n_head_kv and key_len else None))
        elif name.endswith(".attn_v.weight"):
            _expect(info, (n_embd, n_head_kv * value_len if n_head_kv and value_len else None))
        elif name.endswith(".attn_output.weight"):
            _expect(info, (n_head * value_len if n_head and value_len else None, n_embd))


def _expect(info: TensorInfo, dims: tuple[int | None, ...]) -> None:
    """`dims` in ggml order; None matches anything."""
    if len(info.ne) != len(dims) or any(d is not None and d != n for d, n in zip(dims, info.ne, strict=True)):
        want = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
        raise InvalidModelError(f"tensor {info.name!r} has ne={list(info.ne)}, the hyperparameters imply {want}",
                                field=info.name, offset=None)


def _check_tokenizer(metadata: Mapping, tensors: Mapping[str, TensorInfo]) -> None:
    tokens = metadata.get("tokenizer.ggml.tokens")
    if tokens is None:
        return
    if not isinstance(tokens, StringArray | list) or not tokens:
        raise InvalidModelError("tokenizer.ggml.tokens must be a non-empty array of strings",
                                field="tokenizer.ggml.tokens")
    n_vocab = len(tokens)
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        value = metadata.get(key)
        if value is not None and (not isinstance(value, np.ndarray) or len(value) != n_vocab):
            length = len(value) if isinstance(value, np.ndarray | list) else "not an array of"
            raise InvalidModelError(f"{key} has {length} entries but there are {n_vocab} tokens", field=key)
    merges = metadata.get("tokenizer.ggml.merges")
    if merges is not None and not isinstance(merges, StringArray | list):
        raise InvalidModelError("tokenizer.ggml.merges must be an array of strings", field="tokenizer.ggml.merges")
    for key, value in metadata.items():
        if _SPECIAL_ID.fullmatch(key) and (type(value) is not int or not 0 <= value < n_vocab):
            raise InvalidModelError(f"{key} is {value!r}, outside the vocabulary of {n_vocab} tokens", field=key)
