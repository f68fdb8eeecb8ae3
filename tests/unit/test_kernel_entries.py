"""Every kernel entry orders itself against the kernel before it (prelude.h, "Programmatic dependent launch").

On CUDA sm_90+ a kernel may start while the previous one still writes its inputs: the entries that open with
GRID_DEPENDENCY_LATER are launched so (GpuBackend.launch), and every entry lets its successor be scheduled
early. An entry that touched memory before `grid_dependency_wait()` would read stale activations or overwrite
buffers still being read: wrong tokens and no error. This holds each entry of every kernel file to the
contract, read from the sources (engine.backends.kernels.entries, which also tells the host what to launch
programmatically)."""
from __future__ import annotations

import re

import pytest

from engine.backends.kernels import KERNEL_DIR, kernel_files
from engine.backends.kernels.entries import LATER, SYNC, entries, programmatic_entries, statements


def _device_function_body(text: str, name: str) -> str:
    m = re.search(r"__device__[^;{]*?\b" + re.escape(name) + r"\s*\(", text)
    assert m, f"no device function {name}"
    start = text.index("{", m.end()) + 1
    depth, j = 1, start
    while depth:
        depth += (text[j] == "{") - (text[j] == "}")
        j += 1
    return text[start:j - 1]


def test_the_parser_finds_every_entry():
    for f in kernel_files():
        text = (KERNEL_DIR / f).read_text()
        assert len(entries(text)) == len(re.findall(r"\bHALO_KERNEL\b", text)) > 0, f


@pytest.mark.parametrize("file", kernel_files())
def test_each_entry_waits_for_the_previous_kernel_before_touching_memory(file):
    text = (KERNEL_DIR / file).read_text()
    for name, body in entries(text):
        first, *rest = statements(body)
        assert first in (SYNC, LATER), f"{file}: {name} opens with {first!r}"
        if first == LATER:
            # it waits itself, or its one call does (reading only its weights before the wait)
            assert name.startswith("halo_"), f"{file}: a macro-made entry cannot say it is programmatic"
            call = re.match(r"(\w+)\s*(<[^>]*>)?\s*\(", rest[0])
            waits = "grid_dependency_wait()" in body or (
                call is not None and "grid_dependency_wait()" in _device_function_body(text, call.group(1)))
            assert waits, f"{file}: {name} never calls grid_dependency_wait()"


def test_the_decode_matvecs_and_the_kernels_after_them_are_the_programmatic_entries():
    assert programmatic_entries("halo_quant.cu") == {"halo_matmul_mv_t1", "halo_matmul_mv4_t1", "halo_glu_mv_t1",
                                                     "halo_matmul_kq_t1", "halo_glu_kq_t1"}
    assert programmatic_entries("halo_layer.cu") == {"halo_add_norm", "halo_rope_kv", "halo_rope_kv_f16"}
    assert programmatic_entries("halo_sample.cu") == frozenset()


def test_the_parser_sees_a_missing_wait():
    (name, body), = entries("HALO_KERNEL __launch_bounds__(64) void k(float* x) {\n    x[0] = 1.0f;\n}\n")
    assert name == "k" and statements(body)[0] == "x[0] = 1.0f"
