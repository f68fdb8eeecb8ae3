"""The GPU backend, written once over a `RuntimeBinding` (cuda-python, hip-python, or ctypes to HIP/CUDA)."""
from __future__ import annotations

import ctypes
import os

import numpy as np

from ..errors import BackendError
from . import kernels
from .base import Backend, DeviceBuffer, Event, Kernel, MemoryInfo, PinnedHostBuffer, Stream
from .compiler import Compiled, KernelCompiler
from .kernel_params import KernelParams
from .kernel_plan import prebuilt_object
from .kernels.entries import programmatic_entries
from .kernels.prebuilt import load_manifest
from .runtime.binding import D2D, D2H, H2D, RuntimeBinding


def device_attribute(backend: Backend, name: str) -> int:
    """The runtime's attribute `name` (RuntimeBinding.device_attribute) of the backend's device; 0 where there is
    no runtime (a CPU or null backend) or it cannot say."""
    rt = getattr(backend, "rt", None)
    try:
        return int(rt.device_attribute(name, getattr(backend, "device", 0))) if rt is not None else 0
    except BackendError:
        return 0


class GpuBackend(Backend):
    def __init__(self, binding: RuntimeBinding, device: int = 0, load: bool = True):
        super().__init__()
        self.rt = binding
        self.name = binding.name
        self.api = binding.api
        self.device = device
        if load:
            binding.load()
        count = binding.device_count()
        if device >= count:
            raise BackendError(f"{binding.name}: device {device} requested, {count} present")
        binding.set_device(device)
        self.arch = binding.device_arch(device)
        self.compiler = KernelCompiler(binding, self.arch)
        self.prebuilt = load_manifest()          # None where the build step did not run (a source checkout)
        self._modules: dict[str, object] = {}
        self._kernels: dict[tuple[str, str], Kernel] = {}
        self.null_stream = Stream(self, 0)
        self.programmatic = _programmatic_launch(binding, device)
        self.programmatic_everything = False     # set per model (pdl_every_kernel): every captured kernel so
        self._capturing = False
        self._params = KernelParams()

    # memory ----------------------------------------------------------------------------------------------
    def alloc(self, shape, dtype) -> DeviceBuffer:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, 1)
        return DeviceBuffer(self, self.rt.malloc(nbytes), shape, dtype)

    def free(self, buf: DeviceBuffer) -> None:
        self._check_owned(buf)
        self.rt.free(buf.ptr)
        buf.freed = True

    def alloc_pinned(self, shape, dtype) -> PinnedHostBuffer:
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, 1)
        ptr = self.rt.host_alloc(nbytes)
        raw = (ctypes.c_char * nbytes).from_address(ptr)          # host memory: a host view is legitimate
        array = np.frombuffer(raw, dtype=np.uint8)[: nbytes - nbytes % dtype.itemsize].view(dtype).reshape(shape)
        return PinnedHostBuffer(self, ptr, array)

    def free_pinned(self, buf: PinnedHostBuffer) -> None:
        self._check_owned(buf)
        buf.array = None
        self.rt.free_host(buf.ptr)
        buf.freed = True

    def memory_info(self) -> MemoryInfo:
        free, total = self.rt.mem_info()
        return MemoryInfo(free, total)

    # streams and events ----------------------------------------------------------------------------------
    def create_stream(self) -> Stream:
        return Stream(self, self.rt.stream_create())

    def destroy_stream(self, stream: Stream) -> None:
        if stream.handle:
            self.rt.stream_destroy(stream.handle)

    def stream_synchronize(self, stream: Stream) -> None:
        self.rt.stream_synchronize(stream.handle)

    def stream_wait_event(self, stream: Stream, event: Event) -> None:
        self.rt.stream_wait_event(stream.handle, event.handle)

    def create_event(self, timing: bool = False) -> Event:
        return Event(self, self.rt.event_create(timing), timing)

    def destroy_event(self, event: Event) -> None:
        self.rt.event_destroy(event.handle)

    def record_event(self, event: Event, stream: Stream) -> None:
        self.rt.event_record(event.handle, stream.handle)

    def synchronize_event(self, event: Event) -> None:
        self.rt.event_synchronize(event.handle)

    def query_event(self, event: Event) -> bool:
        return self.rt.event_query(event.handle)

    def elapsed_ms(self, start: Event, end: Event) -> float:
        return self.rt.event_elapsed_ms(start.handle, end.handle)

    def synchronize(self) -> None:
        self.rt.device_synchronize()

    # copies ------------------------------------------------------------------------------------------------
    def copy_h2d_async(self, dst, src, stream) -> None:
        self._check_owned(dst, src)
        if isinstance(src, PinnedHostBuffer):
            ptr, nbytes = src.ptr, src.nbytes
        else:   # pageable numpy: the runtime stages it before returning, so the caller may reuse it at once
            src = np.ascontiguousarray(src)
            ptr, nbytes = src.ctypes.data, src.nbytes
        if nbytes > dst.nbytes:
            raise BackendError(f"H2D copy of {nbytes} bytes into a {dst.nbytes}-byte device buffer")
        self.rt.memcpy_async(dst.ptr, ptr, nbytes, H2D, stream.handle)

    def copy_d2h_async(self, dst, src, stream, nbytes=None) -> None:
        self._check_owned(dst, src)
        nbytes = min(dst.nbytes, src.nbytes) if nbytes is None else nbytes
        if nbytes > dst.nbytes or nbytes > src.nbytes:
            raise BackendError(f"D2H copy of {nbytes} bytes exceeds a buffer ({src.nbytes} -> {dst.nbytes})")
        self.rt.memcpy_async(dst.ptr, src.ptr, nbytes, D2H, stream.handle)

    def copy_d2d_async(self, dst, src, stream) -> None:
        self._check_owned(dst, src)
        if src.nbytes > dst.nbytes:
            raise BackendError(f"D2D copy of {src.nbytes} bytes into {dst.nbytes}")
        self.rt.memcpy_async(dst.ptr, src.ptr, src.nbytes, D2D, stream.handle)

    def memset_async(self, buf, byte, stream) -> None:
        self._check_owned(buf)
        self.rt.memset_async(buf.ptr, byte, buf.nbytes, stream.handle)

    # graphs --------------------------------------------------------------------------------------------------
    def begin_capture(self, stream: Stream) -> None:
        """Capture `stream`'s work from here into a graph (cudaStreamBeginCapture, thread-local). Raises
        NotImplementedError where the binding has no graphs. Only captured kernels are launched programmatically
        (see _programmatic_launch): a replay has no host in the way, so the overlap is the step's gain, while
        eager steps are host-bound and cuLaunchKernelEx costs more host time than a plain launch."""
        self.rt.stream_begin_capture(stream.handle)
        self._capturing = True

    def end_capture(self, stream: Stream) -> object:
        """The captured graph (cudaStreamEndCapture)."""
        self._capturing = False
        return self.rt.stream_end_capture(stream.handle)

    # kernels -----------------------------------------------------------------------------------------------
    def kernel(self, source_file: str, function: str) -> Kernel:
        key = (source_file, function)
        if key not in self._kernels:
            if source_file not in self._modules:
                self._modules[source_file] = self._load_module(source_file)
            module, compiled = self._modules[source_file]
            handle = self.rt.module_function(module, function)
            self._kernels[key] = Kernel(function, handle, compiled.seconds, compiled.from_cache,
                                        function in programmatic_entries(source_file))
        return self._kernels[key]

    def _load_module(self, source_file: str) -> tuple[object, Compiled]:
        """(module, its code). A prebuilt object the runtime refuses (say a loader too old for its code object
        version) falls back to the runtime compiler when there is one, keeping the refusal as an advisory."""
        compiled = self._code(source_file)
        try:
            return self.rt.module_load(compiled.code), compiled
        except BackendError as e:
            if not compiled.prebuilt or not self._can_compile():
                raise
            self.advisories.append(f"prebuilt {compiled.path.parent.name}/{compiled.path.name} refused ({e}); "
                                   "compiled at run time instead")
            compiled = self.compiler.compile(kernels.source(source_file), source_file)
            return self.rt.module_load(compiled.code), compiled

    def _code(self, source_file: str) -> Compiled:
        """The prebuilt object for this arch when there is one (kernel_plan.py), else the runtime compiler's.
        An object older than its source is still used when no runtime compiler is there to rebuild it."""
        obj = prebuilt_object(self.api, self.arch, source_file, self.prebuilt)
        if obj is not None:
            if obj.current() or not self._can_compile():
                if not obj.current():
                    self.advisories.append(f"{obj.path.name}: built from an older {source_file}")
                return Compiled(obj.read(), 0.0, True, obj.path, prebuilt=True)
        return self.compiler.compile(kernels.source(source_file), source_file)

    def _can_compile(self) -> bool:
        try:
            self.rt.rtc_version()
            return True
        except Exception:
            return False

    def launch(self, kernel, grid, block, args, stream, shared_bytes=0) -> None:
        if shared_bytes > kernel.shared_allowed:
            self.rt.allow_shared(kernel.handle, shared_bytes)
            kernel.shared_allowed = shared_bytes
        params = self._params.pack(self, args)          # valid until the next launch: the runtime copies the values
        programmatic = (kernel.programmatic or self.programmatic_everything) and self.programmatic and self._capturing
        launch = self.rt.launch_programmatic if programmatic else self.rt.launch
        launch(kernel.handle, _dim3(grid), _dim3(block), shared_bytes, stream.handle, params)

    def close(self) -> None:
        for module, _ in self._modules.values():
            try:
                self.rt.module_unload(module)
            except BackendError as e:
                self.advisories.append(f"module unload: {e}")
        self._modules.clear()
        self._kernels.clear()


# HALO_PDL=0 launches every kernel plainly (stream order alone), for comparison and as a way out.
PDL_ENV = "HALO_PDL"
# Models at least this wide launch every captured kernel programmatically, not only the entries that open with
# GRID_DEPENDENCY_LATER: their long matvecs hide the waits, and every kernel after one starts as it drains. H100,
# decode tok/s, one process per model with the modes interleaved (run 35): Qwen3-4B shapes 382 -> 386 (every
# attention kernel alone gave the same), Qwen3.5-4B 342 -> 356 (attention alone: 342); gemma-3-270m 1,088 -> 1,001
# and SmolLM2 1,042 -> 928, whose 2-4 us kernels lose more to the waits, so they keep the entries' choice (with
# this policy: 1,089 and 1,055, as before).
# HALO_PDL_ALL=1 / 0 forces either (comparisons; the GPU tests run both).
PDL_EVERY_KERNEL_MIN_EMBD = 2048
PDL_ALL_ENV = "HALO_PDL_ALL"


def pdl_every_kernel(n_embd: int) -> bool:
    """Whether a model of embedding width `n_embd` launches every captured kernel programmatically."""
    forced = os.environ.get(PDL_ALL_ENV)
    return forced == "1" if forced in ("0", "1") else n_embd >= PDL_EVERY_KERNEL_MIN_EMBD


def _programmatic_launch(binding: RuntimeBinding, device: int) -> bool:
    """Whether the captured kernels that open with GRID_DEPENDENCY_LATER (kernels.entries) are launched with
    programmatic dependent launch: CUDA devices of compute capability 9.0+ (Hopper and newer) through a binding
    that has cuLaunchKernelEx. Such a kernel is scheduled while the kernel before it still runs (which let it
    at its start), touches only its weights and then waits: the decode matvecs put their rows into L2, and
    add_norm and rope_kv, which follow matvecs, start as soon as those end. H200, decode steps as graphs
    (one process, interleaved): SmolLM2 / gemma-3 / Qwen3-4B shapes 902 / 951 / 317 tok/s plain, 1,011 /
    1,031 / 339 so. Every kernel so (attention and the rest too) gave 849 / 946 / 346: the small models'
    short kernels lose more to the waits than the launch gaps they hide."""
    if binding.api != "cuda" or os.environ.get(PDL_ENV) == "0":
        return False
    if type(binding).launch_programmatic is RuntimeBinding.launch_programmatic:
        return False
    return binding.device_attribute("compute_capability_major", device) >= 9


_DIM3: dict[object, tuple[int, int, int]] = {}      # grid / block as given -> as the runtime takes it
_DIM3_MAX = 4096                                    # distinct shapes kept (a step's grids repeat step after step)


def _dim3(d) -> tuple[int, int, int]:
    """A grid or block as the runtime takes it: three Python ints (an int n is (n, 1, 1)). Each shape is converted
    once: looking it up costs a tenth of converting it (~1.2 us of a launch for a 2-tuple)."""
    try:
        return _DIM3[d]
    except (KeyError, TypeError):                   # new, or a list (not hashable: converted every time)
        pass
    dims = (int(d), 1, 1) if isinstance(d, int) else (tuple(map(int, d)) + (1, 1, 1))[:3]
    if isinstance(d, (int, tuple)):
        if len(_DIM3) >= _DIM3_MAX:
            _DIM3.clear()
        _DIM3[d] = dims
    return dims
