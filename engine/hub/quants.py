"""Quantization names and split parts, read from GGUF file names the way the hub's GGUF repos write them.

    quant_of("Qwen3-8B-Q4_K_M.gguf") == "Q4_K_M"
    split_part("big-Q8_0-00002-of-00003.gguf") == (2, 3)
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from engine.hub.client import RemoteFile

# Longest alternatives first inside each family so Q4_K_M wins over Q4_K and IQ4_XS over IQ4.
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])("
    r"IQ[1-4]_(?:XXS|XS|S|M|NL)|IQ[1-4]"
    r"|Q[2-8]_K_(?:XL|L|M|S)|Q[2-8]_K|Q[4-8]_[01]|Q8_0"
    r"|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|FP16|F32|FP32"
    r")(?![A-Za-z0-9])", re.IGNORECASE)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
UNKNOWN_QUANT = "other"


def quant_of(filename: str) -> str:
    """The quantization a file name declares (upper case, FP16 -> F16), or "other"."""
    name = filename.rsplit("/", 1)[-1]
    found = _QUANT.findall(_SPLIT.sub(".gguf", name))
    if not found:
        return UNKNOWN_QUANT
    q = found[-1].upper()             # the last match: "Llama-3-8B-Q4_K_M" has no earlier one, "F16" suffixes do
    return {"FP16": "F16", "FP32": "F32"}.get(q, q)


def split_part(filename: str) -> tuple[int, int] | None:
    """(part, of) for llama.cpp's split files (`-00001-of-00003.gguf`), else None."""
    m = _SPLIT.search(filename)
    return (int(m.group(1)), int(m.group(2))) if m else None


@dataclass(frozen=True)
class QuantGroup:
    quant: str
    files: tuple[RemoteFile, ...]          # one file, or every part of a split model in order

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def split(self) -> bool:
        return len(self.files) > 1 or split_part(self.files[0].filename) is not None


def group_by_quant(files: Iterable[RemoteFile]) -> list[QuantGroup]:
    """GGUF files grouped as the user picks them: one group per model file (a split model's parts form one
    group). Sorted by size, smallest first. Non-GGUF files are left out."""
    singles: list[QuantGroup] = []
    splits: dict[str, list[RemoteFile]] = {}
    for f in files:
        if not f.filename.lower().endswith(".gguf"):
            continue
        if split_part(f.filename):
            splits.setdefault(_SPLIT.sub("", f.filename), []).append(f)
        else:
            singles.append(QuantGroup(quant_of(f.filename), (f,)))
    for parts in splits.values():
        parts.sort(key=lambda f: split_part(f.filename))
        singles.append(QuantGroup(quant_of(parts[0].filename), tuple(parts)))
    return sorted(singles, key=lambda g: (g.size, g.files[0].filename))
