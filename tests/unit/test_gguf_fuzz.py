"""Fuzz invariant from SAFETY.md: any byte string either loads or raises InvalidModelError, quickly and in
bounded memory. Mutations start from a small valid model so they reach deep into the parser."""
from __future__ import annotations

import atexit
import os
import tempfile
import tracemalloc

import numpy as np
from gguf_builder import minimal_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidModelError, UnsupportedModelError
from engine.gguf import open_gguf

VALID = minimal_model().build()
HEADER = VALID[:24]
MEMORY_CAP = 32 << 20       # bytes of Python/numpy allocations one open may make on these tiny files

_fd, _PATH = tempfile.mkstemp(suffix=".gguf")
os.close(_fd)
atexit.register(os.unlink, _PATH)   # one file rewritten per example: hypothesis and tmp_path do not mix


def loads_or_refuses(data: bytes) -> None:
    with open(_PATH, "wb") as f:
        f.write(data)
    tracemalloc.start()
    try:
        with open_gguf(_PATH) as g:
            for name, info in g.tensors.items():
                try:
                    values = g.dequantize(name)
                except UnsupportedModelError:
                    continue
                assert values.shape == info.shape and values.dtype == np.float32
    except InvalidModelError as e:
        assert str(e)
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MEMORY_CAP, f"{peak} bytes allocated for a {len(data)}-byte file"


FUZZ = settings(deadline=2000, max_examples=250, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data):
    loads_or_refuses(data)


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_after_a_valid_header(data):
    loads_or_refuses(HEADER + data)


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_byte_flips_of_a_valid_file(flips):
    data = bytearray(VALID)
    for at, value in flips:
        data[at] = value
    loads_or_refuses(bytes(data))


# 64-bit fields are where the historic overflows live: write extreme values at random offsets
_EXTREMES = [0, 1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, 2**63, 2**64 - 1, 2**64 - 32]


@FUZZ
@given(st.integers(0, len(VALID) - 8), st.sampled_from(_EXTREMES), st.sampled_from([4, 8]))
def test_extreme_integers_written_into_a_valid_file(at, value, width):
    data = bytearray(VALID)
    data[at:at + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    loads_or_refuses(bytes(data))


@FUZZ
@given(st.integers(0, len(VALID)), st.integers(0, len(VALID)), st.binary(max_size=16))
def test_truncations_and_splices_of_a_valid_file(cut, at, insert):
    loads_or_refuses(VALID[:cut])
    loads_or_refuses(VALID[:at] + insert + VALID[at:])
