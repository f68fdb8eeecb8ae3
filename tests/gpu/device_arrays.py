"""Host arrays onto a backend's device and back, for the GPU tests that drive kernels directly."""
from __future__ import annotations

import numpy as np


def upload(backend, stream, host: np.ndarray):
    """A device buffer holding `host` (copied on `stream`)."""
    buf = backend.alloc(host.shape, host.dtype)
    backend.copy_h2d_async(buf, np.ascontiguousarray(host), stream)
    return buf


def download(backend, stream, buf, shape) -> np.ndarray:
    """float32 `shape` from the device buffer, after everything queued before it."""
    out = backend.alloc_pinned(shape, np.float32)
    try:
        backend.copy_d2h_async(out, buf, stream, nbytes=int(np.prod(shape)) * 4)
        backend.synchronize()
        return out.array.copy()
    finally:
        backend.free_pinned(out)
