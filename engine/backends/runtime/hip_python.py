"""HIP through AMD's hip-python (`from hip import hip, hiprtc`; 10.x is an alias of rocm-bindings-hip).

hip-python opens libamdhip64 lazily, at the first call: a missing library shows up there as a
RuntimeError, which `load()` turns into BackendUnavailableError with the reason.
"""
from __future__ import annotations

from ...errors import BackendUnavailableError, KernelCompileError
from .ctypes_runtime import HIP_ATTRIBUTES
from .tuple_binding import TupleBinding, as_text, mapped


class HipPythonRuntime(TupleBinding):
    name = "hip-python"
    api = "hip"

    def load(self) -> None:
        try:
            from hip import hip
        except ImportError as e:
            raise BackendUnavailableError(f"hip-python not installed ({e})", missing="binding") from None
        self.hip = hip
        try:
            self.hip.hipRuntimeGetVersion()          # forces the lazy dlopen of libamdhip64
        except RuntimeError as e:
            raise BackendUnavailableError(f"hip-python could not open the HIP runtime: {e}",
                                          missing="runtime") from None
        self.library_path = mapped("libamdhip64.so") or "libamdhip64 (path unknown)"
        self.rtc_library_path = "hiprtc not loaded yet"

    def _error_name(self, status) -> str:
        return as_text(self.hip.hipGetErrorName(status))

    def _error_text(self, status) -> str:
        return as_text(self.hip.hipGetErrorString(status))

    # device ------------------------------------------------------------------------------------------
    def device_count(self) -> int:
        return int(self._unwrap(self.hip.hipGetDeviceCount(), "hipGetDeviceCount"))

    def set_device(self, device: int) -> None:
        self._unwrap(self.hip.hipSetDevice(device), "hipSetDevice")

    def _props(self, device: int):
        props = self.hip.hipDeviceProp_t()
        self._unwrap(self.hip.hipGetDeviceProperties(props, device), "hipGetDeviceProperties")
        return props

    def device_name(self, device: int) -> str:
        return as_text(self._props(device).name).split("\x00")[0]

    def device_arch(self, device: int) -> str:
        return as_text(self._props(device).gcnArchName).split("\x00")[0].split(":")[0]

    def device_attribute(self, attribute: str, device: int) -> int:
        attr = self.hip.hipDeviceAttribute_t(HIP_ATTRIBUTES[attribute])
        return int(self._unwrap(self.hip.hipDeviceGetAttribute(attr, device), f"hipDeviceGetAttribute({attribute})"))

    def mem_info(self) -> tuple[int, int]:
        free, total = self._unwrap(self.hip.hipMemGetInfo(), "hipMemGetInfo")
        return int(free), int(total)

    def runtime_version(self) -> int:
        return int(self._unwrap(self.hip.hipRuntimeGetVersion(), "hipRuntimeGetVersion"))

    def driver_version(self) -> int:
        return int(self._unwrap(self.hip.hipDriverGetVersion(), "hipDriverGetVersion"))

    def device_synchronize(self) -> None:
        self._unwrap(self.hip.hipDeviceSynchronize(), "hipDeviceSynchronize")

    # memory ------------------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        return int(self._unwrap(self.hip.hipMalloc(nbytes), "hipMalloc"))

    def free(self, ptr: int) -> None:
        self._unwrap(self.hip.hipFree(ptr), "hipFree")

    def malloc_managed(self, nbytes: int) -> int:
        return int(self._unwrap(self.hip.hipMallocManaged(nbytes, 1), "hipMallocManaged"))

    def host_alloc(self, nbytes: int) -> int:
        return int(self._unwrap(self.hip.hipHostMalloc(nbytes, 0), "hipHostMalloc"))

    def free_host(self, ptr: int) -> None:
        self._unwrap(self.hip.hipHostFree(ptr), "hipHostFree")

    def memcpy_async(self, dst, src, nbytes, kind, stream) -> None:
        kind = self.hip.hipMemcpyKind(kind)
        self._unwrap(self.hip.hipMemcpyAsync(dst, src, nbytes, kind, stream or None), "hipMemcpyAsync")

    def memset_async(self, ptr, value, nbytes, stream) -> None:
        self._unwrap(self.hip.hipMemsetAsync(ptr, value, nbytes, stream or None), "hipMemsetAsync")

    def mem_advise_read_mostly(self, ptr, nbytes, device) -> None:
        advice = self.hip.hipMemoryAdvise.hipMemAdviseSetReadMostly
        self._unwrap(self.hip.hipMemAdvise(ptr, nbytes, advice, device), "hipMemAdvise")

    # streams and events --------------------------------------------------------------------------------
    def stream_create(self) -> int:
        return int(self._unwrap(self.hip.hipStreamCreateWithFlags(1), "hipStreamCreateWithFlags"))

    def stream_destroy(self, stream) -> None:
        self._unwrap(self.hip.hipStreamDestroy(stream), "hipStreamDestroy")

    def stream_synchronize(self, stream) -> None:
        self._unwrap(self.hip.hipStreamSynchronize(stream or None), "hipStreamSynchronize")

    def stream_wait_event(self, stream, event) -> None:
        self._unwrap(self.hip.hipStreamWaitEvent(stream or None, event, 0), "hipStreamWaitEvent")

    def event_create(self, timing: bool) -> int:
        return int(self._unwrap(self.hip.hipEventCreateWithFlags(0 if timing else 2), "hipEventCreateWithFlags"))

    def event_destroy(self, event) -> None:
        self._unwrap(self.hip.hipEventDestroy(event), "hipEventDestroy")

    def event_record(self, event, stream) -> None:
        self._unwrap(self.hip.hipEventRecord(event, stream or None), "hipEventRecord")

    def event_synchronize(self, event) -> None:
        self._unwrap(self.hip.hipEventSynchronize(event), "hipEventSynchronize")

    def event_query(self, event) -> bool:
        (status,) = self.hip.hipEventQuery(event)
        if int(status) == 600:   # hipErrorNotReady
            return False
        self.check(status, "hipEventQuery")
        return True

    def event_elapsed_ms(self, start, end) -> float:
        return float(self._unwrap(self.hip.hipEventElapsedTime(start, end), "hipEventElapsedTime"))

    # runtime compilation and modules --------------------------------------------------------------------
    def _hiprtc(self):
        try:
            from hip import hiprtc
            hiprtc.hiprtcVersion()
        except Exception as e:
            raise KernelCompileError(f"hiprtc not available: {e}") from None
        self.rtc_library_path = mapped("libhiprtc.so") or "hiprtc (path unknown)"
        return hiprtc

    def rtc_version(self) -> str:
        status, major, minor = self._hiprtc().hiprtcVersion()
        return f"hiprtc {major}.{minor}"

    def compile(self, source: str, filename: str, options: list[str]) -> bytes:
        return self._compile_with(self._hiprtc(), "hiprtc", ("GetCodeSize", "GetCode"), source, filename, options)

    def module_load(self, code: bytes) -> object:
        return self._unwrap(self.hip.hipModuleLoadData(code), "hipModuleLoadData")

    def module_function(self, module, name: str) -> object:
        return self._unwrap(self.hip.hipModuleGetFunction(module, name.encode()), "hipModuleGetFunction")

    def module_unload(self, module) -> None:
        self._unwrap(self.hip.hipModuleUnload(module), "hipModuleUnload")

    def launch(self, function, grid, block, shared_bytes, stream, params_address) -> None:
        self._unwrap(self.hip.hipModuleLaunchKernel(function, *grid, *block, shared_bytes, stream or None,
                                                    params_address, None), "hipModuleLaunchKernel")

    # graphs ------------------------------------------------------------------------------------------
    def stream_begin_capture(self, stream) -> None:
        mode = self.hip.hipStreamCaptureMode.hipStreamCaptureModeThreadLocal
        self._unwrap(self.hip.hipStreamBeginCapture(stream or None, mode), "hipStreamBeginCapture")

    def stream_end_capture(self, stream) -> object:
        return self._unwrap(self.hip.hipStreamEndCapture(stream or None), "hipStreamEndCapture")

    def graph_instantiate(self, graph) -> object:
        return self._unwrap(self.hip.hipGraphInstantiateWithFlags(graph, 0), "hipGraphInstantiateWithFlags")

    def graph_launch(self, graph_exec, stream) -> None:
        self._unwrap(self.hip.hipGraphLaunch(graph_exec, stream or None), "hipGraphLaunch")

    def graph_exec_destroy(self, graph_exec) -> None:
        self._unwrap(self.hip.hipGraphExecDestroy(graph_exec), "hipGraphExecDestroy")

    def graph_destroy(self, graph) -> None:
        self._unwrap(self.hip.hipGraphDestroy(graph), "hipGraphDestroy")
