"""CUDA through NVIDIA's cuda-python (`cuda.bindings`: runtime, driver for modules, nvrtc)."""
from __future__ import annotations

from ...errors import BackendUnavailableError, KernelCompileError
from .tuple_binding import TupleBinding, as_text, mapped


class CudaPythonRuntime(TupleBinding):
    name = "cuda-python"
    api = "cuda"

    def load(self) -> None:
        try:
            from cuda.bindings import driver, runtime
        except ImportError as e:
            raise BackendUnavailableError(f"cuda-python not installed ({e})", missing="binding") from None
        import cuda.bindings
        self.rt, self.drv = runtime, driver
        self._streams: dict[int, object] = {}      # stream handle -> its CUstream (_cu_stream)
        self._version = getattr(cuda.bindings, "__version__", "?")
        self.library_path = f"cuda.bindings {self._version}"   # the driver file is added after the first call
        self.rtc_library_path = "nvrtc not loaded yet"

    def _error_name(self, status) -> str:
        if isinstance(status, self.drv.CUresult):
            return as_text(self.drv.cuGetErrorName(status))
        return as_text(self.rt.cudaGetErrorName(status))

    def _error_text(self, status) -> str:
        if isinstance(status, self.drv.CUresult):
            return as_text(self.drv.cuGetErrorString(status))
        return as_text(self.rt.cudaGetErrorString(status))

    # device ------------------------------------------------------------------------------------------
    def device_count(self) -> int:
        n = self._unwrap(self.rt.cudaGetDeviceCount(), "cudaGetDeviceCount")
        driver_file = mapped("libcuda.so")
        if driver_file:
            self.library_path = f"cuda.bindings {self._version} over {driver_file}"
        return n

    def set_device(self, device: int) -> None:
        self._unwrap(self.rt.cudaSetDevice(device), "cudaSetDevice")
        self._unwrap(self.rt.cudaFree(0), "cudaFree(0)")        # primary context current for the driver API
        self._unwrap(self.drv.cuInit(0), "cuInit")

    def device_name(self, device: int) -> str:
        name = self._unwrap(self.drv.cuDeviceGetName(256, device), "cuDeviceGetName")
        return name.split(b"\x00")[0].decode(errors="replace")

    def device_arch(self, device: int) -> str:
        major = self.device_attribute("compute_capability_major", device)
        minor = self.device_attribute("compute_capability_minor", device)
        return f"sm_{major}{minor}"

    def device_attribute(self, attribute: str, device: int) -> int:
        from .ctypes_runtime import CUDA_ATTRIBUTES
        attr = self.rt.cudaDeviceAttr(CUDA_ATTRIBUTES[attribute])
        return int(self._unwrap(self.rt.cudaDeviceGetAttribute(attr, device), f"cudaDeviceGetAttribute({attribute})"))

    def mem_info(self) -> tuple[int, int]:
        free, total = self._unwrap(self.rt.cudaMemGetInfo(), "cudaMemGetInfo")
        return int(free), int(total)

    def runtime_version(self) -> int:
        return int(self._unwrap(self.rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"))

    def driver_version(self) -> int:
        return int(self._unwrap(self.rt.cudaDriverGetVersion(), "cudaDriverGetVersion"))

    def device_synchronize(self) -> None:
        self._unwrap(self.rt.cudaDeviceSynchronize(), "cudaDeviceSynchronize")

    # memory ------------------------------------------------------------------------------------------
    def malloc(self, nbytes: int) -> int:
        return int(self._unwrap(self.rt.cudaMalloc(nbytes), "cudaMalloc"))

    def free(self, ptr: int) -> None:
        self._unwrap(self.rt.cudaFree(ptr), "cudaFree")

    def malloc_managed(self, nbytes: int) -> int:
        return int(self._unwrap(self.rt.cudaMallocManaged(nbytes, 1), "cudaMallocManaged"))

    def host_alloc(self, nbytes: int) -> int:
        return int(self._unwrap(self.rt.cudaHostAlloc(nbytes, 0), "cudaHostAlloc"))

    def free_host(self, ptr: int) -> None:
        self._unwrap(self.rt.cudaFreeHost(ptr), "cudaFreeHost")

    def memcpy_async(self, dst, src, nbytes, kind, stream) -> None:
        kind = self.rt.cudaMemcpyKind(kind)
        self._unwrap(self.rt.cudaMemcpyAsync(dst, src, nbytes, kind, stream), "cudaMemcpyAsync")

    def memset_async(self, ptr, value, nbytes, stream) -> None:
        self._unwrap(self.rt.cudaMemsetAsync(ptr, value, nbytes, stream), "cudaMemsetAsync")

    def mem_advise_read_mostly(self, ptr, nbytes, device) -> None:
        location = self.rt.cudaMemLocation()
        location.type = self.rt.cudaMemLocationType.cudaMemLocationTypeDevice
        location.id = device
        advice = self.rt.cudaMemoryAdvise.cudaMemAdviseSetReadMostly
        self._unwrap(self.rt.cudaMemAdvise(ptr, nbytes, advice, location), "cudaMemAdvise")

    # streams and events --------------------------------------------------------------------------------
    def stream_create(self) -> int:
        return int(self._unwrap(self.rt.cudaStreamCreateWithFlags(1), "cudaStreamCreateWithFlags"))

    def stream_destroy(self, stream) -> None:
        self._unwrap(self.rt.cudaStreamDestroy(stream), "cudaStreamDestroy")

    def stream_synchronize(self, stream) -> None:
        self._unwrap(self.rt.cudaStreamSynchronize(stream), "cudaStreamSynchronize")

    def stream_wait_event(self, stream, event) -> None:
        self._unwrap(self.rt.cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent")

    def event_create(self, timing: bool) -> int:
        return int(self._unwrap(self.rt.cudaEventCreateWithFlags(0 if timing else 2), "cudaEventCreateWithFlags"))

    def event_destroy(self, event) -> None:
        self._unwrap(self.rt.cudaEventDestroy(event), "cudaEventDestroy")

    def event_record(self, event, stream) -> None:
        self._unwrap(self.rt.cudaEventRecord(event, stream), "cudaEventRecord")

    def event_synchronize(self, event) -> None:
        self._unwrap(self.rt.cudaEventSynchronize(event), "cudaEventSynchronize")

    def event_query(self, event) -> bool:
        (status,) = self.rt.cudaEventQuery(event)
        if status == self.rt.cudaError_t.cudaErrorNotReady:
            return False
        self.check(status, "cudaEventQuery")
        return True

    def event_elapsed_ms(self, start, end) -> float:
        return float(self._unwrap(self.rt.cudaEventElapsedTime(start, end), "cudaEventElapsedTime"))

    # runtime compilation and modules --------------------------------------------------------------------
    def _nvrtc(self):
        try:
            from cuda.bindings import nvrtc
            nvrtc.nvrtcVersion()
        except Exception as e:   # cuda.pathfinder raises its own error type when libnvrtc is absent
            raise KernelCompileError(f"nvrtc not available: {e}") from None
        self.rtc_library_path = mapped("libnvrtc.so") or "nvrtc (path unknown)"
        return nvrtc

    def rtc_version(self) -> str:
        status, major, minor = self._nvrtc().nvrtcVersion()
        return f"nvrtc {major}.{minor}"

    def compile(self, source: str, filename: str, options: list[str]) -> bytes:
        return self._compile_with(self._nvrtc(), "nvrtc", ("GetCUBINSize", "GetCUBIN"), source, filename, options)

    def module_load(self, code: bytes) -> object:
        return self._unwrap(self.drv.cuModuleLoadData(code), "cuModuleLoadData")

    def module_function(self, module, name: str) -> object:
        return self._unwrap(self.drv.cuModuleGetFunction(module, name.encode()), "cuModuleGetFunction")

    def module_unload(self, module) -> None:
        self._unwrap(self.drv.cuModuleUnload(module), "cuModuleUnload")

    def _cu_stream(self, stream: int):
        """The CUstream of a stream handle, made once per handle: a launch made one (or cuLaunchKernel, given the
        int, made it itself) every time. A handle reused after its stream is destroyed wraps the same value."""
        cu = self._streams.get(stream)
        if cu is None:
            cu = self._streams[stream] = self.drv.CUstream(stream)
        return cu

    def launch(self, function, grid, block, shared_bytes, stream, params_address) -> None:
        self._unwrap(self.drv.cuLaunchKernel(function, *grid, *block, shared_bytes, self._cu_stream(stream),
                                             params_address, 0), "cuLaunchKernel")

    def allow_shared(self, function, nbytes: int) -> None:
        attribute = self.drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        self._unwrap(self.drv.cuFuncSetAttribute(function, attribute, nbytes), "cuFuncSetAttribute")

    def launch_programmatic(self, function, grid, block, shared_bytes, stream, params_address) -> None:
        # one config reused (its attribute is fixed; launches come from one thread: the engine's or a bench's)
        cfg = getattr(self, "_pdl_config", None)
        if cfg is None:
            attr = self.drv.CUlaunchAttribute()
            attr.id = self.drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
            attr.value.programmaticStreamSerializationAllowed = 1
            cfg = self._pdl_config = self.drv.CUlaunchConfig()
            cfg.attrs = [attr]
            cfg.numAttrs = 1
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = shared_bytes
        cfg.hStream = self._cu_stream(stream)
        self._unwrap(self.drv.cuLaunchKernelEx(cfg, function, params_address, 0), "cuLaunchKernelEx")

    # graphs ------------------------------------------------------------------------------------------
    def stream_begin_capture(self, stream) -> None:
        mode = self.rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        self._unwrap(self.rt.cudaStreamBeginCapture(stream, mode), "cudaStreamBeginCapture")

    def stream_end_capture(self, stream) -> object:
        return self._unwrap(self.rt.cudaStreamEndCapture(stream), "cudaStreamEndCapture")

    def graph_instantiate(self, graph) -> object:
        return self._unwrap(self.rt.cudaGraphInstantiateWithFlags(graph, 0), "cudaGraphInstantiateWithFlags")

    def graph_launch(self, graph_exec, stream) -> None:
        self._unwrap(self.rt.cudaGraphLaunch(graph_exec, stream), "cudaGraphLaunch")

    def graph_exec_destroy(self, graph_exec) -> None:
        self._unwrap(self.rt.cudaGraphExecDestroy(graph_exec), "cudaGraphExecDestroy")

    def graph_destroy(self, graph) -> None:
        self._unwrap(self.rt.cudaGraphDestroy(graph), "cudaGraphDestroy")
