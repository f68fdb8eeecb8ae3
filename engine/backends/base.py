"""The contract every backend implements (CPU/numpy and the one GPU backend over a runtime binding).

Memory is typed: a `DeviceBuffer` is never a host array. It has no host view at all; every way a caller
might try to get one (np.asarray, indexing, iteration, the buffer protocol, .host_view()) raises
HostAccessError naming the capability that is missing. Device results reach the host only through a
`PinnedHostBuffer` after an event (see async_output.py): the cure for the bug in docs/ORIGIN.md.

Streams and events are small handles; ordering rules are the CUDA/HIP ones (work on one stream runs in
order; `stream.wait(event)` orders across streams without blocking the host).
"""
from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ..errors import BackendError, HostAccessError

log = logging.getLogger(__name__)

NO_HOST_VIEW = ("device_memory_host_addressable is not proven for this backend, so device memory has no host "
                "view; copy it into a PinnedHostBuffer behind an event (engine.backends.async_output)")


class DeviceBuffer:
    """`nbytes` of device memory at `ptr`, viewed as `shape` x `dtype`. Owned by `backend`; freed by it."""

    __slots__ = ("backend", "ptr", "nbytes", "dtype", "shape", "freed", "_storage")

    def __init__(self, backend: Backend, ptr: int, shape: tuple[int, ...], dtype, storage=None):
        self.backend = backend
        self.ptr = ptr
        self.dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        self.nbytes = int(math.prod(self.shape)) * self.dtype.itemsize    # (np.prod: ~3 us; views are made per step)
        self.freed = False
        self._storage = storage           # CPU backend only: its "device" memory; never handed out

    def _refuse(self, *_args, **_kwargs):
        raise HostAccessError(f"host view of a {self.backend.name} device buffer ({self.nbytes} bytes at "
                              f"{self.ptr:#x}) refused: {NO_HOST_VIEW}")

    # Every host-view entry point refuses by name, rather than numpy building an object array.
    __array__ = host_view = tolist = __getitem__ = __setitem__ = __iter__ = __buffer__ = _refuse
    __float__ = __int__ = __index__ = __bytes__ = _refuse

    @property
    def __array_interface__(self):
        self._refuse()

    def __len__(self) -> int:
        return self.shape[0] if self.shape else 1

    def __repr__(self) -> str:
        return f"DeviceBuffer({self.backend.name}, {self.shape}, {self.dtype}, ptr={self.ptr:#x})"


NULL_POINTER = np.uint64(0)                  # a null pointer among a launch's args


def pointer_or_null(buf: DeviceBuffer | None):
    """The launch argument for an optional buffer: the buffer itself, or a null pointer."""
    return NULL_POINTER if buf is None else buf


class PinnedHostBuffer:
    """Page-locked host memory the device copies into; `array` is its numpy view (valid until freed).

    Read `array` only after the event that follows the copy has completed."""

    __slots__ = ("backend", "ptr", "nbytes", "array", "freed")

    def __init__(self, backend: Backend, ptr: int, array: np.ndarray):
        self.backend, self.ptr, self.array, self.nbytes, self.freed = backend, ptr, array, array.nbytes, False


@dataclass(eq=False)
class Stream:
    backend: Backend
    handle: int

    def synchronize(self) -> None:
        self.backend.stream_synchronize(self)

    def wait(self, event: Event) -> None:
        """Later work on this stream waits for `event`; the host does not block."""
        self.backend.stream_wait_event(self, event)


@dataclass(eq=False)
class Event:
    backend: Backend
    handle: int
    timing: bool = False

    def record(self, stream: Stream) -> None:
        self.backend.record_event(self, stream)

    def wait(self, stream: Stream) -> None:
        self.backend.stream_wait_event(stream, self)

    def synchronize(self) -> None:
        self.backend.synchronize_event(self)

    def query(self) -> bool:
        return self.backend.query_event(self)


@dataclass(frozen=True)
class MemoryInfo:
    free: int
    total: int


STATIC_SHARED_MAX = 48 * 1024   # the shared memory any CUDA block may take without its function opting in


@dataclass(eq=False)
class Kernel:
    name: str
    handle: object            # GPU: a function handle; CPU: the numpy implementation
    compile_seconds: float = 0.0
    from_cache: bool = False
    programmatic: bool = False   # GPU: opens with GRID_DEPENDENCY_LATER (kernels.entries), so captured steps
                                 # launch it programmatically where the device has that (GpuBackend.launch)
    shared_allowed: int = STATIC_SHARED_MAX   # GPU: the dynamic shared memory its launches may ask (GpuBackend.launch
                                              # raises it, past the static 48 KB, the first time one asks more)


class Backend(ABC):
    """One device, one backend. Not thread-safe: the engine thread owns it."""

    name: str = ""
    api: str = ""             # "cpu", "cuda", "hip"

    def __init__(self):
        self.advisories: list[str] = []     # failed advisory calls, shown in diagnostics; never fatal

    # memory ----------------------------------------------------------------------------------------------
    @abstractmethod
    def alloc(self, shape, dtype) -> DeviceBuffer: ...
    @abstractmethod
    def free(self, buf: DeviceBuffer) -> None: ...
    @abstractmethod
    def alloc_pinned(self, shape, dtype) -> PinnedHostBuffer: ...
    @abstractmethod
    def free_pinned(self, buf: PinnedHostBuffer) -> None: ...
    @abstractmethod
    def memory_info(self) -> MemoryInfo: ...

    # streams and events ----------------------------------------------------------------------------------
    @abstractmethod
    def create_stream(self) -> Stream: ...
    @abstractmethod
    def destroy_stream(self, stream: Stream) -> None: ...
    @abstractmethod
    def stream_synchronize(self, stream: Stream) -> None: ...
    @abstractmethod
    def stream_wait_event(self, stream: Stream, event: Event) -> None: ...
    @abstractmethod
    def create_event(self, timing: bool = False) -> Event: ...
    @abstractmethod
    def destroy_event(self, event: Event) -> None: ...
    @abstractmethod
    def record_event(self, event: Event, stream: Stream) -> None: ...
    @abstractmethod
    def synchronize_event(self, event: Event) -> None: ...
    @abstractmethod
    def query_event(self, event: Event) -> bool: ...
    @abstractmethod
    def elapsed_ms(self, start: Event, end: Event) -> float: ...
    @abstractmethod
    def synchronize(self) -> None: ...

    # copies (all asynchronous with respect to the host; order them with streams and events) -----------
    @abstractmethod
    def copy_h2d_async(self, dst: DeviceBuffer, src: PinnedHostBuffer | np.ndarray, stream: Stream) -> None: ...
    @abstractmethod
    def copy_d2h_async(self, dst: PinnedHostBuffer, src: DeviceBuffer, stream: Stream,
                       nbytes: int | None = None) -> None: ...
    @abstractmethod
    def copy_d2d_async(self, dst: DeviceBuffer, src: DeviceBuffer, stream: Stream) -> None: ...
    @abstractmethod
    def memset_async(self, buf: DeviceBuffer, byte: int, stream: Stream) -> None: ...

    # kernels -----------------------------------------------------------------------------------------------
    @abstractmethod
    def kernel(self, source_file: str, function: str) -> Kernel:
        """Compile (or load from the cache) `function` from engine/backends/kernels/<source_file>."""
    @abstractmethod
    def launch(self, kernel: Kernel, grid, block, args: tuple, stream: Stream, shared_bytes: int = 0) -> None:
        """`args`: DeviceBuffers and numpy scalars (np.int32(...), np.float32(...)): widths are explicit."""

    @abstractmethod
    def close(self) -> None: ...

    # helpers shared by every backend ------------------------------------------------------------------------
    def advise(self, what: str, call) -> bool:
        """Run an advisory runtime call; a failure is logged and kept for diagnostics, never raised."""
        try:
            call()
            return True
        except BackendError as e:
            note = f"{what}: {e}"
            log.warning("advisory call failed (continuing): %s", note)
            self.advisories.append(note)
            return False

    def _check_owned(self, *bufs) -> None:
        for b in bufs:
            if isinstance(b, (DeviceBuffer, PinnedHostBuffer)) and (b.backend is not self or b.freed):
                raise BackendError(f"{b!r} belongs to another backend or was freed")
