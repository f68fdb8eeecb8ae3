"""Every kernel entry orders itself against the kernel before it (prelude.h, "Programmatic dependent launch").

On CUDA sm_90+ the backend launches every kernel with programmatic dependent launch (GpuBackend.programmatic),
so a kernel may start while the previous one still writes its inputs. An entry that touched memory before
`grid_dependency_wait()` would read stale activations or overwrite buffers still being read: wrong tokens with no
error. This holds each entry in every kernel file to the contract, read from the sources themselves."""
from __future__ import annotations

import re

import pytest

from engine.backends.kernels import KERNEL_DIR

KERNEL_FILES = sorted(p.name for p in KERNEL_DIR.glob("*.cu"))


def _entries(text: str) -> list[tuple[str, str]]:
    """(name, body) of each HALO_KERNEL function, macro line continuations joined."""
    text = text.replace("\\\n", "\n")
    out = []
    for m in re.finditer(r"^HALO_KERNEL\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)\s*\(", text, re.M):
        depth, i = 1, m.end()
        while depth:                                       # past the parameter list
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        start = text.index("{", i) + 1
        depth, j = 1, start
        while depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append((m.group(1), text[start:j - 1]))
    return out


def _statements(body: str) -> list[str]:
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", body, flags=re.S)
    return [s.strip() for s in body.split(";") if s.strip()]


def _function_body(text: str, name: str) -> str:
    m = re.search(r"__device__[^;{]*?\b" + re.escape(name) + r"\s*\(", text)
    assert m, f"no device function {name}"
    start = text.index("{", m.end()) + 1
    depth, j = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[start:j - 1]


def test_every_kernel_file_has_entries():
    assert {"halo_quant.cu", "halo_layer.cu", "halo_sample.cu"} <= set(KERNEL_FILES)
    for f in KERNEL_FILES:
        text = (KERNEL_DIR / f).read_text()
        assert len(_entries(text)) == len(re.findall(r"\bHALO_KERNEL\b", text)), f"{f}: an entry the parser missed"


@pytest.mark.parametrize("file", KERNEL_FILES)
def test_each_entry_waits_for_the_previous_kernel_before_touching_memory(file):
    text = (KERNEL_DIR / file).read_text()
    for name, body in _entries(text):
        first, *rest = _statements(body)
        if first == "GRID_DEPENDENCY_SYNC()":
            continue
        # LATER: the entry's one call must wait itself (it may read only its weights before)
        assert first == "GRID_DEPENDENCY_LATER()", f"{file}: {name} opens with {first!r}"
        callee = re.match(r"(\w+)\s*(<[^>]*>)?\s*\(", rest[0]).group(1)
        assert "grid_dependency_wait()" in _function_body(text, callee), f"{file}: {name} -> {callee} never waits"


def test_the_entry_parser_sees_a_missing_wait():
    bad = "HALO_KERNEL void k(float* x) {\n    x[0] = 1.0f;\n}\n"
    (name, body), = _entries(bad)
    assert name == "k" and _statements(body)[0] == "x[0] = 1.0f"
