"""Every backend by name -> the modules that implement it. Packaging reads `hidden_imports()` (the
bindings are imported lazily, so PyInstaller cannot see them); the probe and tests read `BACKENDS`.
Order is preference: HIP first (the product's target), then CUDA, then the CPU fallback."""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from .base import Backend


@dataclass(frozen=True)
class BackendSpec:
    name: str
    module: str                        # the backend implementation
    binding_module: str | None = None  # the runtime binding it runs over (GPU backends)
    binding_class: str | None = None
    binding_args: tuple = ()
    description: str = ""
    api: str = "cpu"                   # "hip", "cuda" or "cpu": which backend setting (diagnostics) takes it


BACKENDS: dict[str, BackendSpec] = {s.name: s for s in (
    BackendSpec("hip-python", "engine.backends.gpu", "engine.backends.runtime.hip_python", "HipPythonRuntime",
                (), "HIP through AMD's hip-python (Linux wheels)", api="hip"),
    BackendSpec("ctypes-hip", "engine.backends.gpu", "engine.backends.runtime.ctypes_runtime", "CtypesRuntime",
                ("hip",), "HIP through ctypes to amdhip64 / libamdhip64 (the Windows path)", api="hip"),
    BackendSpec("cuda-python", "engine.backends.gpu", "engine.backends.runtime.cuda_python", "CudaPythonRuntime",
                (), "CUDA through NVIDIA's cuda-python", api="cuda"),
    BackendSpec("ctypes-cuda", "engine.backends.gpu", "engine.backends.runtime.ctypes_runtime", "CtypesRuntime",
                ("cuda",), "CUDA through ctypes to libcudart/libnvrtc: the HIP ctypes code on NVIDIA", api="cuda"),
    BackendSpec("cpu", "engine.backends.cpu", description="numpy reference and fallback"),
)}


def make_binding(name: str):
    spec = BACKENDS[name]
    if spec.binding_module is None:
        raise ValueError(f"{name} has no runtime binding")
    cls = getattr(importlib.import_module(spec.binding_module), spec.binding_class)
    return cls(*spec.binding_args)


def create(name: str, device: int = 0) -> Backend:
    """A ready backend. Raises BackendUnavailableError (with `.reason`) or another BackendError."""
    spec = BACKENDS[name]
    if spec.binding_module is None:
        from .cpu import CpuBackend
        return CpuBackend(device)
    from .gpu import GpuBackend
    return GpuBackend(make_binding(name), device)


def hidden_imports() -> list[str]:
    mods = ["engine.backends.kernels", "engine.backends.host_read_check"]
    for spec in BACKENDS.values():
        mods += [m for m in (spec.module, spec.binding_module) if m]
    return sorted(set(mods))
