"""Safe asynchronous readback of per-step results (sampled ids and other small arrays).

    compute stream:  ... forward ... sampler -> writes slot.device[...]  -> [fork event]
    copy stream:                                     wait(fork) -> D2H into slot.pinned[...] -> [ready event]
    host (a step later): get_output(): ready.synchronize() once, then read slot.pinned, then release the slot

The host never touches device memory; it reads pinned memory only after the ready event completed, and
the slot's device buffers stay referenced (not reused) until then. Slots are made once by ReadbackPool
and reused: no allocation and no event creation per step. Contract for the runner: write into a slot's
device buffers only on the compute stream, and only between `acquire()` and `start()`; the next step
may read `slot.device[...]` on the device (input ids never round-trip through the host).
The model is vLLM's AsyncGPUModelRunnerOutput.get_output().
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import BackendError
from .base import Backend, DeviceBuffer, Event, PinnedHostBuffer, Stream

# name -> (dtype, max elements per step): what each step sends back. Sampled ids first; anything else small.
DEFAULT_FIELDS = {"ids": ("int32", 256)}


@dataclass(eq=False)
class ReadbackSlot:
    index: int
    device: dict[str, DeviceBuffer]
    pinned: dict[str, PinnedHostBuffer]
    fork: Event
    ready: Event
    in_flight: bool = False
    counts: dict[str, int] = field(default_factory=dict)


class ReadbackPool:
    """A fixed ring of slots made once. `slots` bounds how many steps may be in flight (2-3 is plenty)."""

    def __init__(self, backend: Backend, fields: dict[str, tuple[str, int]] | None = None, slots: int = 3,
                 copy_stream: Stream | None = None):
        self.backend = backend
        self.fields = dict(fields or DEFAULT_FIELDS)
        self.copy_stream = copy_stream or backend.create_stream()
        self._owns_stream = copy_stream is None
        self.slots: list[ReadbackSlot] = []
        for i in range(slots):
            device = {k: backend.alloc(n, dt) for k, (dt, n) in self.fields.items()}
            pinned = {k: backend.alloc_pinned(n, dt) for k, (dt, n) in self.fields.items()}
            self.slots.append(ReadbackSlot(i, device, pinned, backend.create_event(), backend.create_event()))
        self._next = 0

    def acquire(self) -> ReadbackSlot:
        """The next free slot. Raises if every slot is still in flight: call get_output() on the oldest first."""
        for _ in range(len(self.slots)):
            slot = self.slots[self._next]
            self._next = (self._next + 1) % len(self.slots)
            if not slot.in_flight:
                slot.in_flight = True
                return slot
        raise BackendError(f"all {len(self.slots)} readback slots are in flight; get_output() the oldest step first")

    def start(self, slot: ReadbackSlot, counts: dict[str, int], compute_stream: Stream) -> AsyncOutput:
        """Call right after the sampler was launched on `compute_stream`. Never blocks the host."""
        for k, n in counts.items():
            if n > self.fields[k][1]:
                raise BackendError(f"{k}: {n} values exceed the slot's {self.fields[k][1]}")
        slot.counts = dict(counts)
        slot.fork.record(compute_stream)                 # "the sampler has written slot.device"
        self.copy_stream.wait(slot.fork)                 # copy stream waits on the device, not the host
        for k, n in counts.items():
            dev = slot.device[k]
            self.backend.copy_d2h_async(slot.pinned[k], dev, self.copy_stream, nbytes=n * dev.dtype.itemsize)
        slot.ready.record(self.copy_stream)              # "the pinned copies are complete"
        return AsyncOutput(self, slot)

    def release(self, slot: ReadbackSlot) -> None:
        slot.in_flight = False

    def close(self) -> None:
        self.backend.synchronize()
        for slot in self.slots:
            for buf in slot.device.values():
                self.backend.free(buf)
            for buf in slot.pinned.values():
                self.backend.free_pinned(buf)
            self.backend.destroy_event(slot.fork)
            self.backend.destroy_event(slot.ready)
        self.slots.clear()
        if self._owns_stream:
            self.backend.destroy_stream(self.copy_stream)


class AsyncOutput:
    """One step's results on their way to the host. `get_output()` once; it blocks only on the ready event."""

    def __init__(self, pool: ReadbackPool, slot: ReadbackSlot):
        self._pool = pool
        self._slot: ReadbackSlot | None = slot      # keeps the device buffers referenced until read

    def is_ready(self) -> bool:
        return self._slot is None or self._slot.ready.query()

    def get_output(self) -> dict[str, np.ndarray]:
        slot = self._slot
        if slot is None:
            raise BackendError("get_output() called twice for one step")
        slot.ready.synchronize()                     # once; after this the pinned buffers hold the results
        out = {k: slot.pinned[k].array[:n].copy() for k, n in slot.counts.items()}
        self._slot = None
        self._pool.release(slot)
        return out
