"""Turning a runtime's status code into a typed engine error, the same way for CUDA and HIP.

CUDA and HIP name their errors alike (`cudaErrorIllegalAddress` / `hipErrorIllegalAddress`,
`CUDA_ERROR_OUT_OF_MEMORY`), so the class is chosen from the normalised error *name*, never the number.
"""
from __future__ import annotations

from ...errors import BackendError, BackendUnavailableError, DeviceLostError, OutOfDeviceMemoryError

# Normalised name fragments (lower case, no '_', prefix dropped) -> the error class a caller can act on.
_OUT_OF_MEMORY = ("outofmemory", "memoryallocation")
_DEVICE_LOST = ("illegaladdress", "launchfailure", "launchfailed", "launchtimeout", "ecc", "hardwarestackerror",
                "illegalinstruction", "misalignedaddress", "invalidpc", "assert", "contextisdestroyed")
_UNAVAILABLE = ("nodevice", "insufficientdriver", "noinitialized", "notinitialized", "deinitialized",
                "systemdrivermismatch", "compatnotsupportedondevice", "nobinaryforgpu", "invalidkernelfile")


def normalise(error_name: str) -> str:
    key = error_name.lower().replace("_", "")
    for prefix in ("cudaerror", "hiperror", "cudaerror", "error"):
        if key.startswith(prefix):
            return key[len(prefix):]
    return key


def error_class(error_name: str) -> type[BackendError]:
    key = normalise(error_name)
    if any(k in key for k in _OUT_OF_MEMORY):
        return OutOfDeviceMemoryError
    if any(k in key for k in _DEVICE_LOST):
        return DeviceLostError
    if any(k in key for k in _UNAVAILABLE):
        return BackendUnavailableError
    return BackendError


def make_error(what: str, code: int, name: str, text: str) -> BackendError:
    """The error for a failed call `what`; carries the runtime's own name and text."""
    cls = error_class(name)
    err = cls(f"{what} failed: {name} ({code}): {text}")
    err.code = code
    err.error_name = name
    err.error_text = text
    if cls is BackendUnavailableError:
        err.reason = f"{name}: {text}"
    return err
