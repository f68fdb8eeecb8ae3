"""The thin runtime layer `engine.backends.gpu` is written against, once, for CUDA and HIP alike.

Every handle (pointer, stream, event) is a plain int; module and function handles are opaque objects.
Every call checks its status through the binding's one `check()`, which raises the typed errors of
engine.errors (see status.py). The HIP runtime mirrors CUDA call for call, so each method names both.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

# Device facts read through attributes, by our name. Each binding maps them to its own enum.
ATTRIBUTES = ("integrated", "can_map_host_memory", "unified_addressing", "managed_memory",
              "pageable_memory_access", "concurrent_managed_access",
              "pageable_memory_access_uses_host_page_tables", "compute_capability_major",
              "compute_capability_minor", "multiprocessor_count")

H2D, D2H, D2D = 1, 2, 3   # cudaMemcpyKind == hipMemcpyKind for these three


class RuntimeBinding(ABC):
    name: str = ""             # "cuda-python", "hip-python", "ctypes-cuda", "ctypes-hip"
    api: str = ""              # "cuda" or "hip": selects the compile options and how the arch is named
    library_path: str = ""     # runtime library actually loaded, and from where
    rtc_library_path: str = ""

    @abstractmethod
    def load(self) -> None:
        """Open the libraries. Raises BackendUnavailableError saying what is missing and where we looked."""

    # device ------------------------------------------------------------------------------------------
    @abstractmethod
    def device_count(self) -> int: ...          # cudaGetDeviceCount / hipGetDeviceCount
    @abstractmethod
    def set_device(self, device: int) -> None: ...
    @abstractmethod
    def device_name(self, device: int) -> str: ...
    @abstractmethod
    def device_arch(self, device: int) -> str: ...   # "sm_90" / "gfx1151" (gcnArchName, features stripped)
    @abstractmethod
    def device_attribute(self, attribute: str, device: int) -> int: ...
    @abstractmethod
    def mem_info(self) -> tuple[int, int]: ...       # (free, total) bytes
    @abstractmethod
    def runtime_version(self) -> int: ...
    @abstractmethod
    def driver_version(self) -> int: ...
    @abstractmethod
    def device_synchronize(self) -> None: ...

    # memory ------------------------------------------------------------------------------------------
    @abstractmethod
    def malloc(self, nbytes: int) -> int: ...          # cudaMalloc / hipMalloc
    @abstractmethod
    def free(self, ptr: int) -> None: ...
    @abstractmethod
    def malloc_managed(self, nbytes: int) -> int: ...  # cudaMallocManaged / hipMallocManaged, attach global
    @abstractmethod
    def host_alloc(self, nbytes: int) -> int: ...      # cudaHostAlloc / hipHostMalloc: pinned host memory
    @abstractmethod
    def free_host(self, ptr: int) -> None: ...         # cudaFreeHost / hipHostFree
    @abstractmethod
    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None: ...
    @abstractmethod
    def memset_async(self, ptr: int, value: int, nbytes: int, stream: int) -> None: ...
    @abstractmethod
    def mem_advise_read_mostly(self, ptr: int, nbytes: int, device: int) -> None: ...  # advisory only

    # streams and events --------------------------------------------------------------------------------
    @abstractmethod
    def stream_create(self) -> int: ...                 # non-blocking: no implicit sync with the null stream
    @abstractmethod
    def stream_destroy(self, stream: int) -> None: ...
    @abstractmethod
    def stream_synchronize(self, stream: int) -> None: ...
    @abstractmethod
    def stream_wait_event(self, stream: int, event: int) -> None: ...
    @abstractmethod
    def event_create(self, timing: bool) -> int: ...
    @abstractmethod
    def event_destroy(self, event: int) -> None: ...
    @abstractmethod
    def event_record(self, event: int, stream: int) -> None: ...
    @abstractmethod
    def event_synchronize(self, event: int) -> None: ...
    @abstractmethod
    def event_query(self, event: int) -> bool: ...      # True when complete; NotReady -> False
    @abstractmethod
    def event_elapsed_ms(self, start: int, end: int) -> float: ...

    # runtime compilation and modules --------------------------------------------------------------------
    @abstractmethod
    def rtc_version(self) -> str: ...
    @abstractmethod
    def compile(self, source: str, filename: str, options: list[str]) -> bytes:
        """nvrtc -> cubin / hiprtc -> code object. Raises KernelCompileError carrying the whole log."""
    @abstractmethod
    def module_load(self, code: bytes) -> object: ...
    @abstractmethod
    def module_function(self, module: object, name: str) -> object: ...
    @abstractmethod
    def module_unload(self, module: object) -> None: ...
    @abstractmethod
    def launch(self, function: object, grid: tuple[int, int, int], block: tuple[int, int, int],
               shared_bytes: int, stream: int, params_address: int) -> None:
        """cuLaunchKernel / hipModuleLaunchKernel; `params_address` points at a void*[] of argument addresses."""

    # Dynamic shared memory past 48 KB (a block of halo_attention_tc_split takes ~69 KB). Not abstract: HIP has no
    # opt-in (a workgroup may take all of its device's LDS, 64 KB on RDNA), so there it is nothing to do.
    def allow_shared(self, function: object, nbytes: int) -> None:
        """cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES): later launches of `function` may
        ask up to `nbytes` of dynamic shared memory (a launch past the device's most fails as the launch's error)."""
        if self.api != "hip":
            raise NotImplementedError(f"{self.name}: no dynamic shared memory past 48 KB")

    # Programmatic dependent launch (CUDA 12+ on sm_90+; HIP has no counterpart). Not abstract: a binding
    # without it launches everything with launch() (GpuBackend.programmatic says which is used).
    def launch_programmatic(self, function: object, grid: tuple[int, int, int], block: tuple[int, int, int],
                            shared_bytes: int, stream: int, params_address: int) -> None:
        """cuLaunchKernelEx with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION: the kernel may start
        while the stream's previous kernel still runs and orders itself against it (prelude.h's
        GRID_DEPENDENCY_SYNC / grid_dependency_wait). Arguments as launch()."""
        raise NotImplementedError(f"{self.name}: no programmatic dependent launch")

    # graphs (capture a stream's work once, replay it with one launch) --------------------------------------
    # Not abstract: a binding without them still runs everything eagerly (engine.gpu falls back).
    def stream_begin_capture(self, stream: int) -> None:     # cudaStreamBeginCapture / hipStreamBeginCapture
        raise NotImplementedError(f"{self.name}: no graph capture")   # (thread-local mode)

    def stream_end_capture(self, stream: int) -> object:      # cudaStreamEndCapture / hipStreamEndCapture
        raise NotImplementedError(f"{self.name}: no graph capture")

    def graph_instantiate(self, graph: object) -> object:     # cudaGraphInstantiateWithFlags / hip..., flags 0
        raise NotImplementedError(f"{self.name}: no graph capture")

    def graph_launch(self, graph_exec: object, stream: int) -> None:   # cudaGraphLaunch / hipGraphLaunch
        raise NotImplementedError(f"{self.name}: no graph capture")

    def graph_exec_destroy(self, graph_exec: object) -> None:          # cudaGraphExecDestroy / hip...
        raise NotImplementedError(f"{self.name}: no graph capture")

    def graph_destroy(self, graph: object) -> None:                    # cudaGraphDestroy / hipGraphDestroy
        raise NotImplementedError(f"{self.name}: no graph capture")

    def compile_options(self, arch: str) -> list[str]:
        if self.api == "hip":
            return [f"--offload-arch={arch}", "-O3"]
        return [f"--gpu-architecture={arch}"]   # a real sm_XX yields a cubin for exactly this device
