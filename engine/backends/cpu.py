"""The CPU (numpy) backend: the reference, and the fallback. Same contract as the GPU backend.

Its "device" memory is numpy storage hidden inside DeviceBuffer: still a distinct type with no host view,
so code written against this backend cannot rely on reading device memory directly. Work executes at
once, in submission order, so every event is complete when recorded; the readback still goes through
pinned buffers and events, exactly the AsyncOutput shape the GPU uses.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import BackendError, KernelCompileError
from . import kernels
from .base import Backend, DeviceBuffer, Event, Kernel, MemoryInfo, PinnedHostBuffer, Stream

_handles = itertools.count(0x1000)


class CpuBackend(Backend):
    name = "cpu"
    api = "cpu"
    arch = "numpy"

    def __init__(self, device: int = 0):
        super().__init__()
        self.null_stream = Stream(self, 0)

    @staticmethod
    def _bytes(shape, dtype) -> tuple[tuple[int, ...], int]:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return shape, max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)

    def alloc(self, shape, dtype) -> DeviceBuffer:
        shape, nbytes = self._bytes(shape, dtype)
        storage = np.zeros(nbytes, dtype=np.uint8)
        return DeviceBuffer(self, storage.ctypes.data, shape, dtype, storage=storage)

    def free(self, buf) -> None:
        self._check_owned(buf)
        buf._storage = None
        buf.freed = True

    def alloc_pinned(self, shape, dtype) -> PinnedHostBuffer:
        shape, nbytes = self._bytes(shape, dtype)
        array = np.zeros(shape, dtype=dtype)
        return PinnedHostBuffer(self, array.ctypes.data, array)

    def free_pinned(self, buf) -> None:
        self._check_owned(buf)
        buf.array = None
        buf.freed = True

    def memory_info(self) -> MemoryInfo:
        try:
            import os
            pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
            avail = os.sysconf("SC_AVPHYS_PAGES")
            return MemoryInfo(avail * size, pages * size)
        except (ValueError, OSError, AttributeError):
            return MemoryInfo(0, 0)

    # streams and events: everything already ran in order when it was submitted ----------------------
    def create_stream(self) -> Stream:
        return Stream(self, next(_handles))

    def destroy_stream(self, stream) -> None:
        pass

    def stream_synchronize(self, stream) -> None:
        pass

    def stream_wait_event(self, stream, event) -> None:
        pass

    def create_event(self, timing: bool = False) -> Event:
        return Event(self, next(_handles), timing)

    def destroy_event(self, event) -> None:
        pass

    def record_event(self, event, stream) -> None:
        event._recorded_at = _now()

    def synchronize_event(self, event) -> None:
        pass

    def query_event(self, event) -> bool:
        return True

    def elapsed_ms(self, start, end) -> float:
        return (getattr(end, "_recorded_at", 0.0) - getattr(start, "_recorded_at", 0.0)) * 1e3

    def synchronize(self) -> None:
        pass

    # copies --------------------------------------------------------------------------------------------
    def copy_h2d_async(self, dst, src, stream) -> None:
        self._check_owned(dst, src)
        data = (src.array if isinstance(src, PinnedHostBuffer) else np.ascontiguousarray(src)).view(np.uint8).ravel()
        if data.nbytes > dst.nbytes:
            raise BackendError(f"H2D copy of {data.nbytes} bytes into a {dst.nbytes}-byte device buffer")
        dst._storage[: data.nbytes] = data

    def copy_d2h_async(self, dst, src, stream, nbytes=None) -> None:
        self._check_owned(dst, src)
        nbytes = min(dst.nbytes, src.nbytes) if nbytes is None else nbytes
        if nbytes > dst.nbytes or nbytes > src.nbytes:
            raise BackendError(f"D2H copy of {nbytes} bytes exceeds a buffer ({src.nbytes} -> {dst.nbytes})")
        dst.array.reshape(-1).view(np.uint8)[:nbytes] = src._storage[:nbytes]

    def copy_d2d_async(self, dst, src, stream) -> None:
        self._check_owned(dst, src)
        if src.nbytes > dst.nbytes:
            raise BackendError(f"D2D copy of {src.nbytes} bytes into {dst.nbytes}")
        dst._storage[: src.nbytes] = src._storage[: src.nbytes]

    def memset_async(self, buf, byte, stream) -> None:
        self._check_owned(buf)
        buf._storage[:] = byte & 0xFF

    # kernels: the numpy twin of each .cu kernel -------------------------------------------------------------
    def kernel(self, source_file: str, function: str) -> Kernel:
        if not (kernels.KERNEL_DIR / source_file).is_file():
            raise KernelCompileError(f"no kernel source {source_file}")
        fn = kernels.CPU_KERNELS.get(function)
        if fn is None:
            raise KernelCompileError(f"kernel {function} has no CPU implementation in engine.backends.kernels")
        return Kernel(function, fn)

    def launch(self, kernel, grid, block, args, stream, shared_bytes=0) -> None:
        values = []
        for a in args:
            if isinstance(a, DeviceBuffer):
                self._check_owned(a)
                values.append(a._storage)
            elif isinstance(a, np.generic):
                values.append(a)
            else:
                raise TypeError(f"kernel argument {a!r}: pass a DeviceBuffer or a numpy scalar")
        kernel.handle(grid, block, *values)

    def close(self) -> None:
        pass


def _now() -> float:
    import time
    return time.perf_counter()
