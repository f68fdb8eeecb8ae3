"""The backend contract, the same assertions on every available backend."""
from __future__ import annotations

import numpy as np
import pytest

from engine.backends import kernels
from engine.backends.async_output import ReadbackPool
from engine.backends.base import DeviceBuffer, PinnedHostBuffer
from engine.errors import BackendError, HostAccessError


def test_device_buffer_has_no_host_view(backend):
    buf = backend.alloc(16, np.int32)
    try:
        assert isinstance(buf, DeviceBuffer) and buf.nbytes == 64
        for attempt in (lambda: np.asarray(buf), lambda: buf[0], lambda: list(buf), lambda: buf.host_view(),
                        lambda: np.array(buf, dtype=np.int32), lambda: buf.tolist(), lambda: bytes(buf)):
            with pytest.raises(HostAccessError, match="device_memory_host_addressable"):
                attempt()
        with pytest.raises((TypeError, HostAccessError)):   # __buffer__ is honoured from Python 3.12 on
            memoryview(buf)
    finally:
        backend.free(buf)


def test_h2d_d2d_d2h_round_trip(backend):
    stream = backend.create_stream()
    a, b = backend.alloc(1000, np.float32), backend.alloc(1000, np.float32)
    pinned = backend.alloc_pinned(1000, np.float32)
    data = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    done = backend.create_event()
    try:
        backend.copy_h2d_async(a, data, stream)
        backend.copy_d2d_async(b, a, stream)
        backend.copy_d2h_async(pinned, b, stream)
        done.record(stream)
        done.synchronize()
        assert done.query()
        assert isinstance(pinned, PinnedHostBuffer)
        np.testing.assert_array_equal(pinned.array, data)
    finally:
        backend.free(a), backend.free(b), backend.free_pinned(pinned), backend.destroy_event(done)
        backend.destroy_stream(stream)


def test_memset_then_readback(backend):
    stream = backend.create_stream()
    buf, pinned = backend.alloc(64, np.uint8), backend.alloc_pinned(64, np.uint8)
    try:
        backend.memset_async(buf, 0xAB, stream)
        backend.copy_d2h_async(pinned, buf, stream)
        stream.synchronize()
        assert (pinned.array == 0xAB).all()
    finally:
        backend.free(buf), backend.free_pinned(pinned), backend.destroy_stream(stream)


def test_kernel_compile_and_launch(backend):
    add = backend.kernel("selftest.cu", "halo_add_f32")
    n = 3000
    a = np.arange(n, dtype=np.float32)
    b = np.full(n, 0.5, dtype=np.float32)
    stream = backend.create_stream()
    da, db, dout = (backend.alloc(n, np.float32) for _ in range(3))
    out = backend.alloc_pinned(n, np.float32)
    try:
        backend.copy_h2d_async(da, a, stream)
        backend.copy_h2d_async(db, b, stream)
        backend.launch(add, (n + 255) // 256, 256, (dout, da, db, np.int32(n)), stream)
        backend.copy_d2h_async(out, dout, stream)
        stream.synchronize()
        np.testing.assert_array_equal(out.array, a + b)
    finally:
        for d in (da, db, dout):
            backend.free(d)
        backend.free_pinned(out), backend.destroy_stream(stream)


def test_kernel_arguments_must_have_explicit_width(backend):
    k = backend.kernel("selftest.cu", "halo_write_ids")
    buf = backend.alloc(4, np.int32)
    try:
        with pytest.raises(TypeError, match="numpy scalar"):
            backend.launch(k, 1, 32, (buf, 4, 0), backend.create_stream())
    finally:
        backend.free(buf)


def test_events_order_a_second_stream(backend):
    """The copy stream waits on a fork event recorded after the kernel: it must see the kernel's ids."""
    k = backend.kernel("selftest.cu", "halo_write_ids")
    compute, copy = backend.create_stream(), backend.create_stream()
    fork, ready = backend.create_event(), backend.create_event()
    n = 1 << 16
    ids, pinned = backend.alloc(n, np.int32), backend.alloc_pinned(n, np.int32)
    try:
        backend.launch(k, n // 256, 256, (ids, np.int32(n), np.int32(42)), compute)
        fork.record(compute)
        copy.wait(fork)
        backend.copy_d2h_async(pinned, ids, copy)
        ready.record(copy)
        ready.synchronize()
        np.testing.assert_array_equal(pinned.array, kernels.expected_ids(n, 42))
    finally:
        backend.free(ids), backend.free_pinned(pinned)
        for e in (fork, ready):
            backend.destroy_event(e)
        for s in (compute, copy):
            backend.destroy_stream(s)


def test_async_output_pool_round_trips_and_reuses_slots(backend):
    k = backend.kernel("selftest.cu", "halo_write_ids")
    compute = backend.create_stream()
    pool = ReadbackPool(backend, {"ids": ("int32", 32)}, slots=2)
    slot_ids = {id(s) for s in pool.slots}
    try:
        pending = []
        for step in range(6):                      # two steps in flight, like async scheduling
            slot = pool.acquire()
            assert id(slot) in slot_ids            # no new slots, ever
            backend.launch(k, 1, 32, (slot.device["ids"], np.int32(32), np.int32(step)), compute)
            pending.append((step, pool.start(slot, {"ids": 32}, compute)))
            if len(pending) == 2:
                s, out = pending.pop(0)
                np.testing.assert_array_equal(out.get_output()["ids"], kernels.expected_ids(32, s))
        for s, out in pending:
            ids = out.get_output()["ids"]
            np.testing.assert_array_equal(ids, kernels.expected_ids(32, s))
            with pytest.raises(BackendError, match="twice"):
                out.get_output()
    finally:
        pool.close()
        backend.destroy_stream(compute)


def test_pool_refuses_a_fourth_step_in_flight(backend):
    pool = ReadbackPool(backend, {"ids": ("int32", 4)}, slots=3)
    try:
        for _ in range(3):
            pool.acquire()
        with pytest.raises(BackendError, match="in flight"):
            pool.acquire()
    finally:
        pool.close()


def test_buffers_of_another_backend_are_refused(backend):
    from engine.backends.cpu import CpuBackend
    other = CpuBackend()
    foreign = other.alloc(4, np.int32)
    pinned = backend.alloc_pinned(4, np.int32)
    try:
        with pytest.raises(BackendError, match="another backend"):
            backend.copy_d2h_async(pinned, foreign, backend.create_stream())
    finally:
        backend.free_pinned(pinned)


def test_memory_info_and_self_test(backend):
    from engine.backends.selftest import run_self_test
    info = backend.memory_info()
    assert info.total > 0 and 0 <= info.free <= info.total
    result = run_self_test(backend, steps=20)
    assert result.passed, result.error
    assert result.mismatches == 0 and result.step_us_median is not None
