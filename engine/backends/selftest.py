"""The live self-test of the readback path: a kernel writes ids the host can predict; they come back
through AsyncOutput (the path the policy selected) and are compared. Never raises; returns a record."""
from __future__ import annotations

import time

import numpy as np

from . import kernels
from .async_output import ReadbackPool
from .base import Backend
from .facts import SelfTestResult


def run_self_test(backend: Backend, readback_path: str = "pinned D2H copy", steps: int = 200,
                  ids_per_step: int = 8) -> SelfTestResult:
    result = SelfTestResult(backend.name, False, readback_path, steps, ids_per_step)
    start = time.perf_counter()
    pool = compute = None
    try:
        kernel = backend.kernel("selftest.cu", "halo_write_ids")
        result.compile_seconds, result.kernel_from_cache = kernel.compile_seconds, kernel.from_cache
        compute = backend.create_stream()
        pool = ReadbackPool(backend, {"ids": ("int32", ids_per_step)}, slots=2)
        times = []
        for step in range(steps):
            t0 = time.perf_counter()
            slot = pool.acquire()
            backend.launch(kernel, 1, 64, (slot.device["ids"], np.int32(ids_per_step), np.int32(step)), compute)
            ids = pool.start(slot, {"ids": ids_per_step}, compute).get_output()["ids"]
            times.append(time.perf_counter() - t0)
            result.mismatches += int(np.count_nonzero(ids != kernels.expected_ids(ids_per_step, step)))
        us = np.array(times[1:] or times) * 1e6            # the first step pays one-time costs
        result.step_us_median = round(float(np.median(us)), 2)
        result.step_us_p90 = round(float(np.percentile(us, 90)), 2)
        result.passed = result.mismatches == 0
        if not result.passed:
            result.error = f"{result.mismatches} of {steps * ids_per_step} ids differed from the expected ones"
    except Exception as e:       # a self-test reports; it never takes the app down
        result.error = f"{type(e).__name__}: {e}"
    finally:
        for cleanup in (lambda: pool and pool.close(), lambda: compute and backend.destroy_stream(compute)):
            try:
                cleanup()
            except Exception as e:
                result.error = result.error or f"cleanup: {e}"
    result.seconds = round(time.perf_counter() - start, 4)
    return result
