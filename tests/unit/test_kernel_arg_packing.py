"""How GpuBackend.launch hands arguments to the driver: kernelParams is an array of pointers, one per
argument, each to that argument's value. Checked by reading the packed values back through the pointers
(host memory: the packing never touches the device)."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from engine.backends import registry
from engine.backends.gpu import _pack_args
from engine.errors import BackendError


@pytest.fixture()
def backend():
    b = registry.create("cpu")
    yield b
    b.close()


def test_every_argument_sits_behind_its_own_pointer(backend):
    buf = backend.alloc(8, np.float32)
    args = [buf, np.int32(-7), np.float32(1.5), np.uint32(0xFFFFFFFF), np.int64(-(1 << 40)), np.float64(0.25),
            np.uint8(200), np.longlong(-3), np.intc(11)]
    slots, pointers = _pack_args(backend, args)
    read = [ctypes.c_uint64, ctypes.c_int32, ctypes.c_float, ctypes.c_uint32, ctypes.c_int64, ctypes.c_double,
            ctypes.c_uint8, ctypes.c_int64, ctypes.c_int32]
    got = [ct.from_address(pointers[i]).value for i, ct in enumerate(read)]
    assert got == [buf.ptr, -7, 1.5, 0xFFFFFFFF, -(1 << 40), 0.25, 200, -3, 11]
    assert len(pointers) == len(args) and pointers[1] - pointers[0] == 8
    assert ctypes.addressof(slots) == pointers[0]
    backend.free(buf)


def test_arguments_without_an_explicit_width_or_owner_are_refused(backend):
    with pytest.raises(TypeError, match="explicit"):
        _pack_args(backend, [3])
    with pytest.raises(TypeError):
        _pack_args(backend, [np.bool_(True)])
    buf = backend.alloc(8, np.float32)
    backend.free(buf)
    with pytest.raises(BackendError, match="freed"):
        _pack_args(backend, [buf])
    other = registry.create("cpu")
    try:
        foreign = other.alloc(8, np.float32)
        with pytest.raises(BackendError, match="another backend"):
            _pack_args(backend, [foreign])
        other.free(foreign)
    finally:
        other.close()


def test_no_arguments_still_gives_the_driver_a_valid_array(backend):
    slots, pointers = _pack_args(backend, [])
    assert len(pointers) == 1 and ctypes.sizeof(slots) >= 8
