"""ctypes binding to the HIP runtime DLLs / .so (amdhip64_7.dll, libamdhip64.so.5, hiprtc) or, call for call,
to the CUDA runtime (libcudart.so.13/12, libnvrtc, and libcuda for modules).

This is how Windows users on Strix Halo reach HIP when hip-python is not installable; loading the CUDA
libraries through the same code lets that very path run on a real NVIDIA GPU in our tests.
Pointers and sizes are always wrapped (c_void_p, c_size_t): ctypes would pass a bare int as a C int.
"""
from __future__ import annotations

import ctypes
import re
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_void_p

from ...errors import BackendUnavailableError, KernelCompileError
from . import discovery
from .binding import ATTRIBUTES, RuntimeBinding
from .status import make_error

# hipDeviceAttribute_t values (hip_runtime_api.h; the same from ROCm 5.x through 7.x, as in hip-python 10).
HIP_ATTRIBUTES = dict(integrated=16, can_map_host_memory=3, unified_addressing=85, managed_memory=24,
                      pageable_memory_access=65, concurrent_managed_access=9,
                      pageable_memory_access_uses_host_page_tables=66, compute_capability_major=23,
                      compute_capability_minor=61, multiprocessor_count=63)
# cudaDeviceAttr values (driver_types.h).
CUDA_ATTRIBUTES = dict(integrated=18, can_map_host_memory=19, unified_addressing=41, managed_memory=83,
                       pageable_memory_access=88, concurrent_managed_access=89,
                       pageable_memory_access_uses_host_page_tables=100, compute_capability_major=75,
                       compute_capability_minor=76, multiprocessor_count=16)
assert set(HIP_ATTRIBUTES) == set(CUDA_ATTRIBUTES) == set(ATTRIBUTES)

NOT_READY = 600             # cudaErrorNotReady == hipErrorNotReady
EVENT_DISABLE_TIMING = 2    # cudaEventDisableTiming == hipEventDisableTiming
STREAM_NON_BLOCKING = 1     # cudaStreamNonBlocking == hipStreamNonBlocking
MEM_ATTACH_GLOBAL = 1
ADVISE_READ_MOSTLY = 1
CAPTURE_MODE_THREAD_LOCAL = 1   # cudaStreamCaptureModeThreadLocal == hipStreamCaptureModeThreadLocal
CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8


class _MemLocation(ctypes.Structure):      # cudaMemLocation, passed by value to CUDA 13's cudaMemAdvise
    _fields_ = [("type", c_int), ("id", c_int)]


# cuLaunchKernelEx's arguments (cuda.h): CUlaunchAttribute is its id, then the 64-byte CUlaunchAttributeValue
# union at offset 8 (it holds pointers); CUlaunchConfig the grid, block, shared bytes, stream and attributes.
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6


class _LaunchAttribute(ctypes.Structure):
    _fields_ = [("id", c_int), ("value", ctypes.c_uint64 * 8)]   # value[0]'s low 4 bytes: the int member


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid_x", c_uint), ("grid_y", c_uint), ("grid_z", c_uint), ("block_x", c_uint),
                ("block_y", c_uint), ("block_z", c_uint), ("shared_bytes", c_uint), ("stream", c_void_p),
                ("attrs", POINTER(_LaunchAttribute)), ("num_attrs", c_uint)]


_PROGRAMMATIC = _LaunchAttribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, (ctypes.c_uint64 * 8)(1))


class CtypesRuntime(RuntimeBinding):
    def __init__(self, api: str):
        assert api in ("hip", "cuda")
        self.api = api
        self.name = f"ctypes-{api}"
        self._rt = self._mod = self._rtc = None
        self._rtc_error = ""

    # loading -----------------------------------------------------------------------------------------
    def load(self) -> None:
        hip = self.api == "hip"
        rt = self._open(discovery.HIP_RUNTIME if hip else discovery.CUDA_RUNTIME)
        self._rt = rt.handle
        self.library_path = f"{rt.path} ({rt.how})"
        for fn in ("GetErrorName", "GetErrorString"):
            getattr(self._rt, self._p + fn).restype = c_char_p
        if hip:
            self._mod = self._rt           # hipModule* live in the runtime library
        else:
            drv = self._open(discovery.CUDA_DRIVER)
            self._mod = drv.handle         # cuModule*/cuLaunchKernel live in the driver library
        self._declare_launch()
        try:
            rtc = discovery.open_library(discovery.HIPRTC if hip else discovery.NVRTC)
            self._rtc = rtc.handle
            self._rtc_prefix = "hiprtc" if hip else "nvrtc"
            getattr(self._rtc, self._rtc_prefix + "GetErrorString").restype = c_char_p
            self.rtc_library_path = f"{rtc.path} ({rtc.how})"
        except OSError as e:
            if hip and hasattr(self._rt, "hiprtcCreateProgram"):
                # ROCm up to 5.2 (Debian's libamdhip64-5, for one) exports hiprtc from the runtime itself
                self._rtc, self._rtc_prefix = self._rt, "hiprtc"
                self._rt.hiprtcGetErrorString.restype = c_char_p
                self.rtc_library_path = f"{rt.path} (hiprtc inside the HIP runtime)"
            else:                          # no compiler: the device is still usable, compiling is not
                self._rtc_error = str(e)
                self.rtc_library_path = f"not loaded: {e}"

    @property
    def _launch_name(self) -> str:
        return "hipModuleLaunchKernel" if self.api == "hip" else "cuLaunchKernel"

    def _declare_launch(self) -> None:
        """Give the launch entry point its C signature (f, grid x3, block x3, shared bytes, stream, kernelParams, extra)
        once, so a launch passes plain ints: building c_uint / c_void_p objects and a cast for every launch took
        ~5 us of host time, about a kernel's worth on the small models."""
        getattr(self._mod, self._launch_name).argtypes = [c_void_p] + [c_uint] * 7 + [c_void_p] * 3

    @staticmethod
    def _open(spec):
        try:
            return discovery.open_library(spec)
        except OSError as e:
            raise BackendUnavailableError(str(e), missing="runtime") from None

    @property
    def _p(self) -> str:
        return "hip" if self.api == "hip" else "cuda"

    # status --------------------------------------------------------------------------------------------
    def check(self, status: int, what: str) -> None:
        if status == 0:
            return
        name = (getattr(self._rt, self._p + "GetErrorName")(status) or b"?").decode(errors="replace")
        text = (getattr(self._rt, self._p + "GetErrorString")(status) or b"?").decode(errors="replace")
        raise make_error(what, status, name, text)

    def _check_mod(self, status: int, what: str) -> None:
        if status == 0 or self.api == "hip":
            return self.check(status, what)
        name, text = c_char_p(), c_char_p()         # CUDA driver API: cuGetErrorName(CUresult, const char**)
        self._mod.cuGetErrorName(status, byref(name))
        self._mod.cuGetErrorString(status, byref(text))
        raise make_error(what, status, (name.value or b"CUDA_ERROR_?").decode(), (text.value or b"?").decode())

    def _call(self, fn: str, *args) -> None:
        self.check(getattr(self._rt, self._p + fn)(*args), self._p + fn)

    # device ------------------------------------------------------------------------------------------
    def device_count(self) -> int:
        n = c_int(0)
        self._call("GetDeviceCount", byref(n))
        return n.value

    def set_device(self, device: int) -> None:
        self._call("SetDevice", c_int(device))
        if self.api == "cuda":
            self._call("Free", c_void_p(0))        # make the primary context current for the driver API
            self._check_mod(self._mod.cuInit(c_uint(0)), "cuInit")

    def device_name(self, device: int) -> str:
        buf = ctypes.create_string_buffer(256)
        fn = "hipDeviceGetName" if self.api == "hip" else "cuDeviceGetName"
        self._check_mod(getattr(self._mod, fn)(buf, c_int(256), c_int(device)), fn)
        return buf.value.decode(errors="replace")

    def device_arch(self, device: int) -> str:
        if self.api == "cuda":
            major = self.device_attribute("compute_capability_major", device)
            minor = self.device_attribute("compute_capability_minor", device)
            return f"sm_{major}{minor}"
        # gcnArchName sits deep inside hipDeviceProp_t, whose layout changed in HIP 6 (the R0600 struct).
        # Rather than hard-code two layouts, read the struct into a roomy buffer and take the one
        # "gfx..." string after the 256-byte name field.
        props = ctypes.create_string_buffer(16384)
        fn = "hipGetDevicePropertiesR0600" if hasattr(self._rt, "hipGetDevicePropertiesR0600") \
            else "hipGetDeviceProperties"
        self.check(getattr(self._rt, fn)(props, c_int(device)), fn)
        return parse_gcn_arch(props.raw[256:])

    def device_attribute(self, attribute: str, device: int) -> int:
        table = HIP_ATTRIBUTES if self.api == "hip" else CUDA_ATTRIBUTES
        value = c_int(0)
        self._call("DeviceGetAttribute", byref(value), c_int(table[attribute]), c_int(device))
        return value.value

    def mem_info(self) -> tuple[int, int]:
        free, total = c_size_t(0), c_size_t(0)
        self._call("MemGetInfo", byref(free), byref(total))
        return free.value, total.value

    def runtime_version(self) -> int:
        v = c_int(0)
        self._call("RuntimeGetVersion", byref(v))
        return v.value

    def driver_version(self) -> int:
        v = c_int(0)
        self._call("DriverGetVersion", byref(v))
        return v.value

    def device_synchronize(self) -> None:
        self._call("DeviceSynchronize")

    # memory ------------------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        p = c_void_p()
        self._call("Malloc", byref(p), c_size_t(nbytes))
        return p.value or 0

    def free(self, ptr: int) -> None:
        self._call("Free", c_void_p(ptr))

    def malloc_managed(self, nbytes: int) -> int:
        p = c_void_p()
        self._call("MallocManaged", byref(p), c_size_t(nbytes), c_uint(MEM_ATTACH_GLOBAL))
        return p.value or 0

    def host_alloc(self, nbytes: int) -> int:
        p = c_void_p()
        self._call("HostMalloc" if self.api == "hip" else "HostAlloc", byref(p), c_size_t(nbytes), c_uint(0))
        return p.value or 0

    def free_host(self, ptr: int) -> None:
        self._call("HostFree" if self.api == "hip" else "FreeHost", c_void_p(ptr))

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        self._call("MemcpyAsync", c_void_p(dst), c_void_p(src), c_size_t(nbytes), c_int(kind), c_void_p(stream))

    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None:
        self._call("MemsetAsync", c_void_p(ptr), c_int(value), c_size_t(nbytes), c_void_p(stream))

    def mem_advise_read_mostly(self, ptr: int, nbytes: int, device: int) -> None:
        if self.api == "cuda" and self.runtime_version() >= 13000:
            location = _MemLocation(1, device)    # cudaMemLocationTypeDevice
            self._call("MemAdvise", c_void_p(ptr), c_size_t(nbytes), c_int(ADVISE_READ_MOSTLY), location)
        else:
            self._call("MemAdvise", c_void_p(ptr), c_size_t(nbytes), c_int(ADVISE_READ_MOSTLY), c_int(device))

    # streams and events --------------------------------------------------------------------------------
    def stream_create(self) -> int:
        s = c_void_p()
        self._call("StreamCreateWithFlags", byref(s), c_uint(STREAM_NON_BLOCKING))
        return s.value or 0

    def stream_destroy(self, stream: int) -> None:
        self._call("StreamDestroy", c_void_p(stream))

    def stream_synchronize(self, stream: int) -> None:
        self._call("StreamSynchronize", c_void_p(stream))

    def stream_wait_event(self, stream: int, event: int) -> None:
        self._call("StreamWaitEvent", c_void_p(stream), c_void_p(event), c_uint(0))

    def event_create(self, timing: bool) -> int:
        e = c_void_p()
        self._call("EventCreateWithFlags", byref(e), c_uint(0 if timing else EVENT_DISABLE_TIMING))
        return e.value or 0

    def event_destroy(self, event: int) -> None:
        self._call("EventDestroy", c_void_p(event))

    def event_record(self, event: int, stream: int) -> None:
        self._call("EventRecord", c_void_p(event), c_void_p(stream))

    def event_synchronize(self, event: int) -> None:
        self._call("EventSynchronize", c_void_p(event))

    def event_query(self, event: int) -> bool:
        status = getattr(self._rt, self._p + "EventQuery")(c_void_p(event))
        if status == NOT_READY:
            return False
        self.check(status, self._p + "EventQuery")
        return True

    def event_elapsed_ms(self, start: int, end: int) -> float:
        ms = c_float(0)
        self._call("EventElapsedTime", byref(ms), c_void_p(start), c_void_p(end))
        return ms.value

    # runtime compilation and modules --------------------------------------------------------------------
    def _rtc_call(self, fn: str, *args) -> int:
        if self._rtc is None:
            raise KernelCompileError(f"no runtime compiler: {self._rtc_error}")
        return getattr(self._rtc, self._rtc_prefix + fn)(*args)

    def _rtc_text(self, status: int) -> str:
        return (getattr(self._rtc, self._rtc_prefix + "GetErrorString")(status) or b"?").decode()

    def rtc_version(self) -> str:
        major, minor = c_int(0), c_int(0)
        status = self._rtc_call("Version", byref(major), byref(minor))
        return f"{self._rtc_prefix} {major.value}.{minor.value}" if status == 0 else f"unknown ({status})"

    def compile(self, source: str, filename: str, options: list[str]) -> bytes:
        prog = c_void_p()
        status = self._rtc_call("CreateProgram", byref(prog), source.encode(), filename.encode(), 0, None, None)
        if status:
            raise KernelCompileError(f"{self._rtc_prefix}CreateProgram failed: {self._rtc_text(status)}")
        try:
            opts = (c_char_p * len(options))(*[o.encode() for o in options])
            status = self._rtc_call("CompileProgram", prog, c_int(len(options)), opts)
            size = c_size_t(0)
            self._rtc_call("GetProgramLogSize", prog, byref(size))
            log = ctypes.create_string_buffer(max(size.value, 1))
            self._rtc_call("GetProgramLog", prog, log)
            if status:
                raise KernelCompileError(f"{filename}: {self._rtc_text(status)} (options {' '.join(options)})",
                                         log.value.decode(errors="replace"))
            get_size, get_code = ("GetCodeSize", "GetCode") if self.api == "hip" else ("GetCUBINSize", "GetCUBIN")
            self._rtc_call(get_size, prog, byref(size))
            code = ctypes.create_string_buffer(size.value)
            status = self._rtc_call(get_code, prog, code)
            if status:
                raise KernelCompileError(f"{self._rtc_prefix}{get_code} failed: {self._rtc_text(status)}")
            return code.raw
        finally:
            self._rtc_call("DestroyProgram", byref(prog))

    def module_load(self, code: bytes) -> object:
        module = c_void_p()
        fn = "hipModuleLoadData" if self.api == "hip" else "cuModuleLoadData"
        self._check_mod(getattr(self._mod, fn)(byref(module), c_char_p(code)), fn)
        return module

    def module_function(self, module: object, name: str) -> object:
        function = c_void_p()
        fn = "hipModuleGetFunction" if self.api == "hip" else "cuModuleGetFunction"
        self._check_mod(getattr(self._mod, fn)(byref(function), module, name.encode()), fn)
        return function

    def module_unload(self, module: object) -> None:
        fn = "hipModuleUnload" if self.api == "hip" else "cuModuleUnload"
        self._check_mod(getattr(self._mod, fn)(module), fn)

    def launch(self, function, grid, block, shared_bytes, stream, params_address) -> None:
        fn = self._launch_name                  # argument types: _declare_launch
        status = getattr(self._mod, fn)(function, *grid, *block, shared_bytes, stream, params_address, None)
        self._check_mod(status, fn)

    def allow_shared(self, function, nbytes: int) -> None:
        if self.api == "hip":
            return                              # no opt-in there (RuntimeBinding.allow_shared)
        attribute = c_int(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
        self._check_mod(self._mod.cuFuncSetAttribute(function, attribute, c_int(nbytes)), "cuFuncSetAttribute")

    def launch_programmatic(self, function, grid, block, shared_bytes, stream, params_address) -> None:
        if self.api == "hip":
            raise NotImplementedError(f"{self.name}: HIP has no programmatic dependent launch")
        cfg = _LaunchConfig(*grid, *block, shared_bytes, stream, ctypes.pointer(_PROGRAMMATIC), 1)
        self._check_mod(self._mod.cuLaunchKernelEx(byref(cfg), function,
                                                   ctypes.cast(c_void_p(params_address), POINTER(c_void_p)), None),
                        "cuLaunchKernelEx")

    # graphs: the runtime calls of both APIs (cuda*/hip* with the same arguments) ------------------------
    def stream_begin_capture(self, stream: int) -> None:
        self._call("StreamBeginCapture", c_void_p(stream), c_int(CAPTURE_MODE_THREAD_LOCAL))

    def stream_end_capture(self, stream: int) -> object:
        graph = c_void_p()
        self._call("StreamEndCapture", c_void_p(stream), byref(graph))
        return graph

    def graph_instantiate(self, graph: object) -> object:
        graph_exec = c_void_p()
        self._call("GraphInstantiateWithFlags", byref(graph_exec), graph, ctypes.c_ulonglong(0))
        return graph_exec

    def graph_launch(self, graph_exec: object, stream: int) -> None:
        self._call("GraphLaunch", graph_exec, c_void_p(stream))

    def graph_exec_destroy(self, graph_exec: object) -> None:
        self._call("GraphExecDestroy", graph_exec)

    def graph_destroy(self, graph: object) -> None:
        self._call("GraphDestroy", graph)


_GFX = re.compile(rb"gfx[0-9a-f]{3,6}")


def parse_gcn_arch(raw: bytes) -> str:
    """'gfx1151' from the bytes of a hipDeviceProp_t after its name (gcnArchName may carry ':sramecc+...')."""
    m = _GFX.search(raw)
    if not m:
        raise make_error("hipGetDeviceProperties (gcnArchName)", -1, "hipErrorUnknownArch",
                         "no gfx architecture name in the device properties")
    return m.group(0).decode()
