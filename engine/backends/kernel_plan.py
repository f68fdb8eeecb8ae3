"""Where a backend's kernels come from: a prebuilt code object shipped with the app, the runtime compiler
(hiprtc / NVRTC), or nowhere (with the reason and what to install). Pure: facts in, a plan out; the GPU
backend loads by it and the probe / diagnostics print its line, so both always agree.

HIP prefers the prebuilt object for the device's gcnArchName (feature suffixes stripped): AMD's Windows
display driver ships the HIP runtime but no hiprtc, so the prebuilt objects are what makes the GPU path start
on a stock Windows machine. hiprtc remains the fallback for other archs and for kernels edited after the build.
CUDA keeps NVRTC (no cubins are shipped yet).
"""
from __future__ import annotations

from dataclasses import dataclass

from .kernels.prebuilt import Manifest, PrebuiltObject, base_arch

PREBUILT, RUNTIME, NONE = "prebuilt", "runtime compiler", "none"
INSTALL = {"hip": "install the AMD HIP SDK (it provides hiprtc), or use a build of Halo Chat with objects for it",
           "cuda": "install NVIDIA's NVRTC (the CUDA toolkit, or pip install nvidia-cuda-nvrtc-cu12)"}


@dataclass(frozen=True)
class KernelPlan:
    how: str            # PREBUILT, RUNTIME or NONE
    line: str           # one line for diagnostics: "kernels: prebuilt for gfx1151 (code object v5, ...)"


def plan(api: str, arch: str | None, manifest: Manifest | None, rtc_version: str | None,
         rtc_error: str = "") -> KernelPlan:
    """`arch`: the device's arch, None when no device could be asked (the plan then covers every target
    shipped). `rtc_version`: e.g. "hiprtc 5.2", None when the runtime compiler is absent (`rtc_error` why)."""
    if api == "cpu":
        return KernelPlan(NONE, "kernels: numpy on the host CPU (nothing to compile)")
    if api == "hip" and manifest is not None and manifest.objects:
        built = f"(code object v{manifest.code_object_version}, built with {manifest.compiler})"
        if arch is None:
            return KernelPlan(PREBUILT, f"kernels: prebuilt for {', '.join(manifest.targets())} {built}; "
                                        "the device's arch picks one")
        if manifest.covers(arch):
            return KernelPlan(PREBUILT, f"kernels: prebuilt for {base_arch(arch)} {built}")
    if rtc_version:
        return KernelPlan(RUNTIME, f"kernels: compiled at run time by {rtc_version}")
    where = f" for {base_arch(arch)}" if arch else ""
    shipped = (f"this build has objects for {', '.join(manifest.targets())} only"
               if api == "hip" and manifest is not None and manifest.objects else "no prebuilt objects in this build")
    compiler = "hiprtc" if api == "hip" else "nvrtc"
    return KernelPlan(NONE, f"kernels: none{where}: {shipped}, and {compiler} is not available "
                            f"({rtc_error or 'not found'}); {INSTALL.get(api, '')}")


def prebuilt_object(api: str, arch: str, kernel_set: str, manifest: Manifest | None) -> PrebuiltObject | None:
    """The object GpuBackend loads for `kernel_set` on `arch`, or None (then the runtime compiler is used)."""
    if api != "hip" or manifest is None:
        return None
    return manifest.find(arch, kernel_set)
