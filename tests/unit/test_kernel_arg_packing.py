"""How GpuBackend.launch hands arguments to the driver: kernelParams is an array of pointers, one per
argument, each to that argument's value (engine.backends.kernel_params). Checked by reading the packed values
back through the pointers (host memory: the packing never touches the device)."""
from __future__ import annotations

import ctypes
import struct

import numpy as np
import pytest

from engine.backends import registry
from engine.backends.kernel_params import KernelParams, arg_layout
from engine.errors import BackendError


@pytest.fixture()
def backend():
    b = registry.create("cpu")
    yield b
    b.close()


def _pointers(address: int, n: int) -> list[int]:
    return list((ctypes.c_uint64 * n).from_address(address))


def test_every_argument_sits_behind_its_own_pointer(backend):
    buf = backend.alloc(8, np.float32)
    args = [buf, np.int32(-7), np.float32(1.5), np.uint32(0xFFFFFFFF), np.int64(-(1 << 40)), np.float64(0.25),
            np.uint8(200), np.longlong(-3), np.intc(11)]
    params = KernelParams()
    pointers = _pointers(params.pack(backend, args), len(args))
    read = [ctypes.c_uint64, ctypes.c_int32, ctypes.c_float, ctypes.c_uint32, ctypes.c_int64, ctypes.c_double,
            ctypes.c_uint8, ctypes.c_int64, ctypes.c_int32]
    got = [ct.from_address(pointers[i]).value for i, ct in enumerate(read)]
    assert got == [buf.ptr, -7, 1.5, 0xFFFFFFFF, -(1 << 40), 0.25, 200, -3, 11]
    assert pointers == list(range(pointers[0], pointers[0] + 8 * len(args), 8))
    assert ctypes.addressof(params.slots) == pointers[0]
    backend.free(buf)


def test_packed_slots_equal_struct_packing_of_the_values(backend):
    """A matmul-like signature (pointers, int32, float32 mixed): the slots hold exactly what struct packs, each value
    padded to 8 bytes; a second launch of the same signature reuses the layout and overwrites every value."""
    a, b = backend.alloc(16, np.float32), backend.alloc(4, np.int32)
    params = KernelParams()
    for k, eps, rows in ((576, 1e-5, 1536), (960, 0.5, 64)):
        args = (a, np.int32(k), np.float32(eps), b, np.int32(rows), np.uint64(0))
        params.pack(backend, args)
        expected = struct.pack("<Qi4xf4xQi4xQ", a.ptr, k, np.float32(eps).item(), b.ptr, rows, 0)
        assert params.slots.raw[:len(expected)] == expected
    assert arg_layout(args) is arg_layout((b, np.int32(1), np.float32(2), a, np.int32(3), np.uint64(4)))
    backend.free(a)
    backend.free(b)


def test_arguments_without_an_explicit_width_or_owner_are_refused(backend):
    params = KernelParams()
    with pytest.raises(TypeError, match="explicit"):
        params.pack(backend, [3])
    with pytest.raises(TypeError, match="explicit"):
        params.pack(backend, [np.int32(3), 2.5])
    with pytest.raises(TypeError):
        params.pack(backend, [np.bool_(True)])
    buf = backend.alloc(8, np.float32)
    params.pack(backend, [buf, np.int32(1)])            # the signature's layout is now kept ...
    backend.free(buf)
    with pytest.raises(BackendError, match="freed"):    # ... and still checks every buffer
        params.pack(backend, [buf, np.int32(1)])
    other = registry.create("cpu")
    try:
        foreign = other.alloc(8, np.float32)
        with pytest.raises(BackendError, match="another backend"):
            params.pack(backend, [foreign, np.int32(1)])
        other.free(foreign)
    finally:
        other.close()


def test_no_arguments_still_gives_the_driver_a_valid_array(backend):
    params = KernelParams()
    assert params.pack(backend, []) == ctypes.addressof(params.pointers)
    assert len(params.pointers) >= 1 and ctypes.sizeof(params.slots) >= 8


def test_more_arguments_than_slots_grow_the_buffer(backend):
    params = KernelParams(capacity=2)
    args = [np.int32(i) for i in range(5)]
    pointers = _pointers(params.pack(backend, args), 5)
    assert [ctypes.c_int32.from_address(p).value for p in pointers] == [0, 1, 2, 3, 4]
    assert params.capacity >= 5
