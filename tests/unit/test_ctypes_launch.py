"""CtypesRuntime.launch passes plain ints through the entry point's declared C signature (_declare_launch): checked
by calling through a real C function pointer with cuLaunchKernel's signature that records what C received (the
driver itself is not needed: this is ctypes' conversion of our arguments, not the launch)."""
from __future__ import annotations

import ctypes
from ctypes import c_int, c_uint, c_void_p
from types import SimpleNamespace

import pytest

from engine.backends.runtime.ctypes_runtime import CtypesRuntime
from engine.errors import BackendError

LAUNCH = ctypes.CFUNCTYPE(c_int, c_void_p, *[c_uint] * 7, *[c_void_p] * 3)


def _entry_point(fn):
    """A C function pointer to `fn` as a library hands it out: no argument types until someone declares them. Kept
    alive by the returned pointer's `_callback`."""
    callback = LAUNCH(fn)
    entry = ctypes.CFUNCTYPE(c_int)(ctypes.cast(callback, c_void_p).value)
    entry.argtypes, entry._callback = None, callback
    return entry


@pytest.mark.parametrize("api,entry", [("cuda", "cuLaunchKernel"), ("hip", "hipModuleLaunchKernel")])
def test_launch_hands_c_its_arguments_as_declared(api, entry):
    seen = []
    rt = CtypesRuntime(api)
    rt._mod = SimpleNamespace(**{entry: _entry_point(lambda *args: seen.append(args) or 0)})
    rt._declare_launch()
    params = (c_void_p * 2)(0x1000, 0x2000)
    stream = 0x7F12_3456_7890                  # 64-bit handles: an undeclared argument would go as a C int
    rt.launch(c_void_p(0xF00D), (7, 2, 1), (128, 1, 1), 4096, stream, ctypes.addressof(params))
    rt.launch(c_void_p(0xF00D), (1, 1, 1), (32, 1, 1), 0, 0, ctypes.addressof(params))
    assert seen[0] == (0xF00D, 7, 2, 1, 128, 1, 1, 4096, stream, ctypes.addressof(params), None)
    assert seen[1][7:10] == (0, None, ctypes.addressof(params))      # the null stream is a null pointer


def test_a_failed_launch_still_raises_with_the_entry_points_name():
    rt = CtypesRuntime("hip")
    rt._mod = rt._rt = SimpleNamespace(hipModuleLaunchKernel=_entry_point(lambda *args: 98),  # hipErrorInvalidHandle
                                       hipGetErrorName=lambda status: b"hipErrorInvalidHandle",
                                       hipGetErrorString=lambda status: b"invalid resource handle")
    rt._declare_launch()
    with pytest.raises(BackendError, match="hipModuleLaunchKernel failed: hipErrorInvalidHandle"):
        rt.launch(c_void_p(1), (1, 1, 1), (1, 1, 1), 0, 0, 0)
