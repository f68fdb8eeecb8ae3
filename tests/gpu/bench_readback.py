"""GPU readback benchmark (prints figures; not a test). Run by tests/gpu/run.sh on the device machine.

Per GPU backend: the per-step latency of launch + fork event + copy-stream wait + D2H into pinned memory
+ ready-event sync, for 8 and 256 ids; and steps/s with two steps in flight (the async-scheduling shape).
"""
from __future__ import annotations

import time

import numpy as np

from engine.backends import registry
from engine.backends.async_output import ReadbackPool
from engine.backends.probe import probe


def bench(name: str, ids: int, steps: int = 3000, in_flight: int = 1) -> float:
    backend = registry.create(name)
    k = backend.kernel("selftest.cu", "halo_write_ids")
    compute = backend.create_stream()
    pool = ReadbackPool(backend, {"ids": ("int32", ids)}, slots=in_flight + 1)
    pending = []
    for warm in (True, False):
        t0 = time.perf_counter()
        for step in range(200 if warm else steps):
            slot = pool.acquire()
            backend.launch(k, 1, 256, (slot.device["ids"], np.int32(ids), np.int32(step)), compute)
            pending.append(pool.start(slot, {"ids": ids}, compute))
            if len(pending) >= in_flight:
                pending.pop(0).get_output()
        while pending:
            pending.pop(0).get_output()
        seconds = time.perf_counter() - t0
    pool.close()
    backend.destroy_stream(compute)
    backend.close()
    return seconds / steps * 1e6


def main() -> None:
    for name, spec in registry.BACKENDS.items():
        if not spec.binding_module:
            continue
        r = probe(name, host_read_checks=False)
        if not r.available:
            print(f"{name}: skipped ({r.reason})")
            continue
        for ids in (8, 256):
            sync = bench(name, ids, in_flight=1)
            overlap = bench(name, ids, in_flight=2)
            print(f"{name} {r.facts.name}: {ids:4d} ids/step: {sync:7.2f} us/step (1 in flight), "
                  f"{overlap:7.2f} us/step (2 in flight)")


if __name__ == "__main__":
    main()
