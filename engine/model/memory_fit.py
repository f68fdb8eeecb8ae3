"""Where a model fits, in words a Strix Halo owner can act on: the GPU, the CPU, or neither.

An integrated GPU (Strix Halo, 128 GB LPDDR5X) has no memory of its own. The firmware carves a *dedicated*
part out of RAM for it (the "UMA frame buffer" / "iGPU memory" / Variable Graphics Memory setting: 512 MB to
96 GB); the CPU and the OS never see that part. On top of it the driver lets the GPU borrow *shared* system
memory up to a limit (Windows: half of the RAM the OS keeps; Linux: the amdgpu GTT size, half by default,
set by `amdgpu.gttsize` / `ttm.pages_limit`). So a 96 GB setting leaves the CPU ~32 GB, and a runtime may
report only the dedicated part, or dedicated + shared. The verdict takes the figures the runtime and OS
report (MemoryFacts) and the model's needs from the one set of formulas (engine.gpu.preflight.plan_memory,
engine.model.host_memory.plan_host_memory), and says which pool limits what, and what to change.
Pure: facts in, verdict out; tested on a table of machines.
"""
from __future__ import annotations

import glob
import os
import sys
from dataclasses import dataclass
from typing import Literal

GIB = 1 << 30


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


@dataclass(frozen=True)
class MemoryFacts:
    host_total: int                     # RAM the OS manages (an integrated GPU's dedicated part is not in it)
    host_available: int                 # of it, available to this process now
    gpu_name: str = ""                  # "": no usable GPU
    gpu_total: int = 0                  # the device memory the GPU runtime reports
    gpu_free: int = 0
    integrated: bool = False
    dedicated: int | None = None        # integrated: the firmware's carve-out (None: not known)
    platform: str = "linux"             # "linux" | "win32"


@dataclass(frozen=True)
class FitVerdict:
    where: Literal["gpu", "cpu"] | None
    gpu_fits: bool
    cpu_fits: bool
    words: str


def integrated_gpu_words(gpu_total: int, dedicated: int | None = None, platform: str = sys.platform) -> str:
    """The sentence on how an integrated GPU's memory is split and what limits it (for a refusal message)."""
    words = _shared_words(MemoryFacts(0, 0, "", gpu_total, 0, True, dedicated, platform))
    return (words[0].upper() + words[1:] + ". Raise the dedicated memory in the firmware setup (UMA frame buffer / "
            "iGPU memory)" + ("" if platform == "win32" else " or the GTT limit") + " to give it more.")


def amd_dedicated_bytes(sysfs: str = "/sys/class/drm") -> int | None:
    """Linux amdgpu: the firmware carve-out of an integrated GPU (mem_info_vram_total of the first card whose
    VRAM is smaller than its GTT, as on an APU), or None where it cannot be read."""
    for path in sorted(glob.glob(os.path.join(sysfs, "card*", "device", "mem_info_vram_total"))):
        try:
            with open(path, encoding="ascii") as f:
                vram = int(f.read().strip())
            with open(os.path.join(os.path.dirname(path), "mem_info_gtt_total"), encoding="ascii") as f:
                gtt = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if 0 < vram <= gtt:
            return vram
    return None


def _shared_words(f: MemoryFacts) -> str:
    """How an integrated GPU's memory is split, and what limits the shared part on this OS."""
    if f.dedicated is None:
        split = (f"this integrated GPU has no memory of its own: the runtime offers {_gib(f.gpu_total)} of the "
                 f"machine's RAM, part dedicated to it in the firmware, part shared")
    else:
        shared = f.gpu_total - f.dedicated
        more = (f"the runtime reports {_gib(shared)} more of shared system memory it may borrow" if shared >= GIB
                else "the runtime counts none of the shared system memory it could borrow")
        split = (f"this integrated GPU has no memory of its own: {_gib(f.dedicated)} of RAM is dedicated to it in "
                 f"the firmware (the CPU never sees that part) and {more}")
    limit = ("Windows lets it borrow at most half of the RAM the system keeps" if f.platform == "win32" else
             "Linux caps the shared part at the amdgpu GTT size (half of the RAM unless amdgpu.gttsize or "
             "ttm.pages_limit raise it)")
    return f"{split}; {limit}"


def _cpu_words(f: MemoryFacts, need: int, fits: bool) -> str:
    words = f"The CPU path needs {_gib(need)} of RAM and {_gib(f.host_available)} are available"
    if fits:
        return words + ": it runs on the CPU instead (slower)."
    words += ": it does not fit there either." if f.gpu_name else ": it does not fit."
    if f.dedicated:
        words += (f" The {_gib(f.dedicated)} dedicated to the integrated GPU is invisible to the CPU: a smaller "
                  f"dedicated setting in the firmware gives the CPU that memory back.")
    return words


def fit_verdict(f: MemoryFacts, gpu_need: int, cpu_need: int) -> FitVerdict:
    """`gpu_need` / `cpu_need`: the pre-flight totals on each path (bytes)."""
    gpu_fits = bool(f.gpu_name) and gpu_need <= f.gpu_free
    cpu_fits = cpu_need <= f.host_available
    if gpu_fits:
        words = f"Fits on {f.gpu_name}: needs {_gib(gpu_need)} of the {_gib(f.gpu_free)} free."
        if f.integrated:
            words += f" ({_shared_words(f)[0].upper() + _shared_words(f)[1:]}.)"
        return FitVerdict("gpu", True, cpu_fits, words)
    words = ""
    if f.gpu_name:
        words = (f"Does not fit on {f.gpu_name}: needs {_gib(gpu_need)}, the GPU runtime reports "
                 f"{_gib(f.gpu_free)} free of {_gib(f.gpu_total)}. ")
        if f.integrated:
            words += (f"{_shared_words(f)[0].upper() + _shared_words(f)[1:]}. Raise the dedicated memory in the "
                      f"firmware setup (UMA frame buffer / iGPU memory)"
                      + ("" if f.platform == "win32" else " or the GTT limit") + " so the GPU can hold it. ")
    words += _cpu_words(f, cpu_need, cpu_fits)
    return FitVerdict("cpu" if cpu_fits else None, False, cpu_fits, words)
