"""Finding the HIP / CUDA shared libraries the way hip-python's own loader does, and saying where we looked.

Order, filename-major (a better name in a later folder beats a worse name in an earlier one):
  1. version-suffixed names first (amdhip64_7.dll before amdhip64_6.dll; libamdhip64.so.7 before .so.5),
  2. folders: the ROCm wheels' `_rocm_sdk_core` (or NVIDIA's `nvidia/*` wheels), HIP_PATH / ROCM_PATH
     (CUDA_PATH / CUDA_HOME), the usual install prefix, and on Windows every PATH entry; except that HIP on
     Windows (`driver_first`) starts with System32 and PATH, where AMD's display driver installs the runtime
     (no HIP SDK needed), then the wheels, and the SDK's HIP_PATH\bin last,
  3. then the bare names through the system loader (System32 on Windows, ld.so's cache on Linux).
The search itself is pure (platform, environment and folders are arguments), so the Windows branch is
unit-tested on fake trees; `open_library` is the one place that loads anything.
"""
from __future__ import annotations

import ctypes
import fnmatch
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class LibrarySpec:
    """One library, by its names on each platform (patterns allowed: hiprtc DLLs carry the HIP version)."""
    role: str                          # "hip runtime", "hiprtc", "cuda runtime", "nvrtc", "cuda driver"
    windows: tuple[str, ...]
    linux: tuple[str, ...]
    wheel_dirs: tuple[str, ...] = ()   # folders relative to site-packages, per platform subfolder below
    env_vars: tuple[str, ...] = ()
    prefixes: tuple[str, ...] = ()     # absolute install prefixes tried on Linux (e.g. /opt/rocm)
    driver_first: bool = False         # Windows: System32 and PATH before the wheels and the SDK folders

    def names(self, platform: str) -> tuple[str, ...]:
        return self.windows if platform == "win32" else self.linux


HIP_RUNTIME = LibrarySpec(
    "hip runtime", windows=("amdhip64_7.dll", "amdhip64_6.dll", "amdhip64.dll"),
    linux=("libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"),
    wheel_dirs=("_rocm_sdk_core",), env_vars=("HIP_PATH", "ROCM_PATH", "ROCM_HOME"), prefixes=("/opt/rocm",),
    driver_first=True)
# Looked up on its own and optional: the display driver does not ship it (only the HIP SDK does); a prebuilt
# code object for the device's arch makes it unnecessary (backends/kernel_plan.py).
HIPRTC = LibrarySpec(
    "hiprtc", windows=("hiprtc07??.dll", "hiprtc06??.dll", "hiprtc*.dll"),
    linux=("libhiprtc.so.7", "libhiprtc.so.6", "libhiprtc.so.5", "libhiprtc.so"),
    wheel_dirs=("_rocm_sdk_core",), env_vars=("HIP_PATH", "ROCM_PATH", "ROCM_HOME"), prefixes=("/opt/rocm",),
    driver_first=True)
CUDA_RUNTIME = LibrarySpec(
    "cuda runtime", windows=("cudart64_13*.dll", "cudart64_12*.dll"), linux=("libcudart.so.13", "libcudart.so.12"),
    wheel_dirs=("nvidia/cu13", "nvidia/cuda_runtime", "nvidia/cu12"), env_vars=("CUDA_PATH", "CUDA_HOME"),
    prefixes=("/usr/local/cuda",))
NVRTC = LibrarySpec(
    "nvrtc", windows=("nvrtc64_13*.dll", "nvrtc64_12*.dll"), linux=("libnvrtc.so.13", "libnvrtc.so.12"),
    wheel_dirs=("nvidia/cu13", "nvidia/cuda_nvrtc", "nvidia/cu12"), env_vars=("CUDA_PATH", "CUDA_HOME"),
    prefixes=("/usr/local/cuda",))
CUDA_DRIVER = LibrarySpec("cuda driver", windows=("nvcuda.dll",), linux=("libcuda.so.1",))


@dataclass
class Search:
    """Where a library was looked for; `found` is a full path, or a bare name left to the system loader."""
    spec: LibrarySpec
    folders: list[str] = field(default_factory=list)
    found: str | None = None

    def not_found_reason(self) -> str:
        names = ", ".join(self.spec.names(sys.platform))
        where = "; ".join(self.folders) if self.folders else "(no folders)"
        return f"{self.spec.role} ({names}) not found in: {where}, nor by the system loader"


def candidate_folders(spec: LibrarySpec, platform: str, env: dict, site_dirs: list[str]) -> list[Path]:
    """Folders to scan, in order. `lib`/`bin` placement differs: DLLs live in bin, .so files in lib(64)."""
    subdirs = ("bin",) if platform == "win32" else ("lib", "lib64")
    folders: list[Path] = []
    driver_first = platform == "win32" and spec.driver_first
    if driver_first:
        folders.append(Path(env.get("SystemRoot") or env.get("WINDIR") or "C:\\Windows", "System32"))
        folders += [Path(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    for site in site_dirs:
        for wheel in spec.wheel_dirs:
            folders += [Path(site, wheel, sub) for sub in subdirs]
    for var in spec.env_vars:
        if env.get(var):
            folders += [Path(env[var], sub) for sub in subdirs]
    if platform != "win32":
        folders += [Path(prefix, sub) for prefix in spec.prefixes for sub in subdirs]
    elif not driver_first:
        folders += [Path(p) for p in env.get("PATH", "").split(os.pathsep) if p]
    unique: list[Path] = []
    for f in folders:
        if f not in unique:
            unique.append(f)
    return unique


def _matches(folder: Path, pattern: str) -> list[Path]:
    if not any(ch in pattern for ch in "*?["):
        p = folder / pattern
        return [p] if p.is_file() else []
    try:
        names = sorted((n for n in os.listdir(folder) if fnmatch.fnmatch(n.lower(), pattern.lower())), reverse=True)
    except OSError:
        return []
    # hiprtc-builtins*.dll is the header blob beside hiprtc, never the compiler itself.
    return [folder / n for n in names if "builtins" not in n.lower()]


def search(spec: LibrarySpec, platform: str = sys.platform, env: dict | None = None,
           site_dirs: list[str] | None = None) -> Search:
    env = dict(os.environ) if env is None else env
    site_dirs = _site_dirs() if site_dirs is None else site_dirs
    folders = candidate_folders(spec, platform, env, site_dirs)
    result = Search(spec, folders=[str(f) for f in folders])
    for pattern in spec.names(platform):
        for folder in folders:
            hits = _matches(folder, pattern)
            if hits:
                result.found = str(hits[0])
                return result
    return result


def _site_dirs() -> list[str]:
    import site
    dirs = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    user = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    return dirs + ([user] if user else [])


@dataclass
class LoadedLibrary:
    handle: ctypes.CDLL
    path: str          # the file the loader actually mapped
    how: str           # "found in <folder>" or "system loader"


_dll_dir_handles: list = []   # os.add_dll_directory handles must stay alive or the folder drops off the path


def open_library(spec: LibrarySpec, platform: str = sys.platform, env: dict | None = None) -> LoadedLibrary:
    """Load the first library `search` finds, else try the bare names. Raises OSError with every place tried."""
    found = search(spec, platform, env)
    errors: list[str] = []
    if found.found:
        folder = str(Path(found.found).parent)
        if platform == "win32" and hasattr(os, "add_dll_directory"):
            _dll_dir_handles.append(os.add_dll_directory(folder))   # dependencies beside it must resolve too
        try:
            lib = ctypes.CDLL(found.found)
            return LoadedLibrary(lib, loaded_path(lib, found.found), f"found in {folder}")
        except OSError as e:
            errors.append(f"{found.found}: {e}")
    for name in spec.names(platform):
        if any(ch in name for ch in "*?["):
            continue
        try:
            lib = ctypes.CDLL(name)
            return LoadedLibrary(lib, loaded_path(lib, name), "system loader")
        except OSError as e:
            errors.append(f"{name}: {e}")
    raise OSError(found.not_found_reason() + ("; load errors: " + " | ".join(errors) if errors else ""))


def loaded_path(lib: ctypes.CDLL, fallback: str) -> str:
    """The absolute path of a loaded library: GetModuleFileNameW on Windows, /proc/self/maps on Linux."""
    if sys.platform == "win32":
        buf = ctypes.create_unicode_buffer(32768)
        if ctypes.windll.kernel32.GetModuleFileNameW(ctypes.c_void_p(lib._handle), buf, len(buf)):
            return buf.value
        return fallback
    return path_from_maps(Path("/proc/self/maps"), Path(fallback).name) or fallback


def path_from_maps(maps_file: Path, soname: str) -> str | None:
    """The mapped file whose name starts with `soname`'s stem (libamdhip64.so.5 -> libamdhip64.so.5.2.21153)."""
    try:
        lines = maps_file.read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) == 6 and Path(parts[5]).name.startswith(soname):
            return parts[5]
    return None
