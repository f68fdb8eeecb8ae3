"""On a real GPU: the probe's facts, the self-test, async output round trips, and the original fault class."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from engine.backends import kernels, registry
from engine.backends.async_output import ReadbackPool
from engine.backends.policy import PINNED_COPY
from engine.backends.selftest import run_self_test
from engine.errors import HostAccessError

from .conftest import gpu_probe

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def test_probe_reads_real_facts(gpu_name):
    r = gpu_probe(gpu_name)
    f, caps = r.facts, r.capabilities
    print(f"\n{gpu_name}: {r.to_dict()}")
    assert f.name and f.total_memory > f.free_memory > 0
    assert f.arch.startswith("sm_") if f.api == "cuda" else f.arch.startswith("gfx")
    assert None not in (f.integrated, f.managed_memory, f.pageable_memory_access, f.can_map_host_memory)
    assert caps.async_sampled_token_readback.value is True
    assert caps.readback_path == PINNED_COPY          # zero-copy is not implemented, so never chosen
    # Both reads ran in children (never skipped where the attributes allow them), and only the read of a plain
    # allocation, the kind the engine's buffers are, decides host addressability.
    if caps.unified_memory.value:
        assert not f.device_host_read.startswith("not run") and not f.managed_host_read.startswith("not run")
    assert caps.device_memory_host_addressable.value is (caps.unified_memory.value and f.device_host_read == "passed")
    if f.api == "cuda" and f.integrated is False and not f.pageable_memory_access_uses_host_page_tables:
        # a discrete NVIDIA GPU without host page tables: the host cannot read a cudaMalloc pointer
        assert f.device_host_read.startswith("failed: the child died with signal"), f.device_host_read
        assert not caps.device_memory_host_addressable.value


def test_self_test_passes(gpu_name):
    backend = registry.create(gpu_name)
    try:
        result = run_self_test(backend, steps=500)
        print(f"\n{gpu_name} self-test: {result.to_dict()}")
        assert result.passed, result.error
        second = run_self_test(backend, steps=10)
        assert second.kernel_from_cache is None or second.passed
    finally:
        backend.close()


def test_kernel_cache_is_reused_by_a_new_backend(gpu_name):
    first = registry.create(gpu_name)
    k1 = first.kernel("selftest.cu", "halo_write_ids")
    first.close()
    second = registry.create(gpu_name)
    k2 = second.kernel("selftest.cu", "halo_write_ids")
    second.close()
    assert k2.from_cache, (k1, k2)


def test_async_output_many_steps_in_flight(gpu_name):
    backend = registry.create(gpu_name)
    k = backend.kernel("selftest.cu", "halo_write_ids")
    compute = backend.create_stream()
    pool = ReadbackPool(backend, {"ids": ("int32", 256), "logprobs": ("float32", 256)}, slots=3)
    try:
        pending = []
        for step in range(300):
            slot = pool.acquire()
            n = 1 + step % 256
            backend.launch(k, 1, 256, (slot.device["ids"], np.int32(n), np.int32(step)), compute)
            backend.memset_async(slot.device["logprobs"], 0, compute)
            pending.append((step, n, pool.start(slot, {"ids": n, "logprobs": n}, compute)))
            if len(pending) == 3:
                s, m, out = pending.pop(0)
                got = out.get_output()
                np.testing.assert_array_equal(got["ids"], kernels.expected_ids(m, s))
                assert (got["logprobs"] == 0).all()
        for s, m, out in pending:
            np.testing.assert_array_equal(out.get_output()["ids"], kernels.expected_ids(m, s))
    finally:
        pool.close()
        backend.destroy_stream(compute)
        backend.close()


FAULT_CHILD = textwrap.dedent("""
    import ctypes, sys
    from engine.backends import registry
    b = registry.create(sys.argv[1])
    buf = b.alloc(8, "int32")
    b.memset_async(buf, 1, b.null_stream)
    b.synchronize()
    print("reading device pointer on the host", flush=True)
    ctypes.string_at(buf.ptr, 32)        # what the original fallback did: dereference device memory
    print("survived", flush=True)
""")


def test_original_fault_class_and_the_safe_path(gpu_name):
    # 1. The bug, reproduced in a child: a host read of a cudaMalloc/hipMalloc pointer kills the process.
    proc = subprocess.run([sys.executable, "-c", FAULT_CHILD, gpu_name], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    print(f"\n{gpu_name}: host read of device memory in a child -> exit {proc.returncode}; "
          f"stdout {proc.stdout.strip()!r}")
    assert "reading device pointer" in proc.stdout
    assert proc.returncode < 0 and "survived" not in proc.stdout, (proc.returncode, proc.stderr[-500:])

    # 2. The engine's own API refuses the same read by name, in this process, which survives.
    backend = registry.create(gpu_name)
    try:
        buf = backend.alloc(8, np.int32)
        with pytest.raises(HostAccessError, match="device_memory_host_addressable"):
            np.asarray(buf)
        backend.free(buf)
        # 3. ... and the safe path returns the right ids.
        k = backend.kernel("selftest.cu", "halo_write_ids")
        compute = backend.create_stream()
        pool = ReadbackPool(backend, {"ids": ("int32", 8)}, slots=2)
        slot = pool.acquire()
        backend.launch(k, 1, 32, (slot.device["ids"], np.int32(8), np.int32(7)), compute)
        ids = pool.start(slot, {"ids": 8}, compute).get_output()["ids"]
        np.testing.assert_array_equal(ids, kernels.expected_ids(8, 7))
        pool.close()
        backend.destroy_stream(compute)
    finally:
        backend.close()


def test_compile_error_carries_the_compiler_log(gpu_name, tmp_path):
    from engine.errors import KernelCompileError
    backend = registry.create(gpu_name)
    try:
        with pytest.raises(KernelCompileError) as info:
            backend.compiler.compile('extern "C" __global__ void broken(int* p) { p[0] = undefined_name; }',
                                     "broken.cu")
        assert "undefined_name" in info.value.log
    finally:
        backend.close()
