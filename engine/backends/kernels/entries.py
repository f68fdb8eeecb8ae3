"""The kernel entries of a source file and how each opens (prelude.h, "Programmatic dependent launch").

Read from the sources themselves, so the host's launch mode and the kernel's own ordering cannot drift apart:
an entry whose body opens with GRID_DEPENDENCY_LATER() prefetches its weights before waiting for the kernel
before it, and only such an entry gains from being launched programmatically (GpuBackend.launch)."""
from __future__ import annotations

import functools
import re
from typing import NamedTuple

from . import KERNEL_DIR

SYNC, LATER = "GRID_DEPENDENCY_SYNC()", "GRID_DEPENDENCY_LATER()"
_ENTRY = re.compile(r"^HALO_KERNEL\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(", re.M)


class Entry(NamedTuple):
    name: str          # a macro parameter (NAME) for entries a macro defines
    body: str


def _block_end(text: str, i: int, open_: str, close: str) -> int:
    """Index just past the bracket that closes the one opened before text[i]."""
    depth = 1
    while depth:
        depth += (text[i] == open_) - (text[i] == close)
        i += 1
    return i


def entries(text: str) -> list[Entry]:
    text = text.replace("\\\n", "\n")                   # macro bodies read as code
    out = []
    for m in _ENTRY.finditer(text):
        start = text.index("{", _block_end(text, m.end(), "(", ")")) + 1
        out.append(Entry(m.group(1), text[start:_block_end(text, start, "{", "}") - 1]))
    return out


def statements(body: str) -> list[str]:
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S)
    return [s.strip() for s in body.split(";") if s.strip()]


@functools.cache
def programmatic_entries(file: str) -> frozenset[str]:
    """Names of the entries of `file` that open with GRID_DEPENDENCY_LATER()."""
    return frozenset(e.name for e in entries((KERNEL_DIR / file).read_text()) if statements(e.body)[:1] == [LATER])
