"""Ahead-of-time compiled HIP code objects shipped inside the package: where they live and how to pick one.

Layout (written by `python -m engine.backends.kernels.build`, git-ignored, carried by the wheel and the
installer):
    prebuilt/manifest.json            {"code_object_version", "compiler", "options", "objects": [...]}
    prebuilt/<target>/<kernel set>.hsaco   one ELF code object per (target, kernel source file)
Each manifest object: {"target", "kernel_set" (the .cu file name), "path" (relative), "source_sha256" (of the
exact text compiled), "object_sha256", "kernels" (names in the object)}.
This module only reads: it never needs a compiler, so the runtime imports it on machines without one.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from . import KERNEL_DIR, source

PREBUILT_DIR = KERNEL_DIR / "prebuilt"
# What an offline clang needs before kernels.source(file) and hiprtc provides by itself: the hash in the
# manifest is over HEADER + source, so an edited kernel file no longer matches its object.
HEADER = "#include <hip/hip_runtime.h>\n"
MANIFEST = "manifest.json"
# The RDNA targets Strix Halo owners and their neighbours have: Strix Halo / Strix Point, RDNA3, RDNA4.
TARGETS = ("gfx1151", "gfx1150", "gfx1100", "gfx1101", "gfx1102", "gfx1200", "gfx1201")


def base_arch(gcn_arch_name: str) -> str:
    """The device's gcnArchName without feature suffixes: 'gfx1151:xnack-' -> 'gfx1151'."""
    return gcn_arch_name.split(":", 1)[0].strip()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PrebuiltObject:
    target: str
    kernel_set: str
    path: Path
    code_object_version: int
    compiler: str               # e.g. "clang 19.1.7"
    source_sha256: str
    kernels: tuple[str, ...]

    def read(self) -> bytes:
        return self.path.read_bytes()

    def current(self) -> bool:
        """True when the object was built from today's source of its kernel file."""
        return self.source_sha256 == source_sha256(self.kernel_set)


def source_sha256(kernel_set: str) -> str:
    return sha256((HEADER + source(kernel_set)).encode())


@dataclass(frozen=True)
class Manifest:
    root: Path
    code_object_version: int
    compiler: str
    options: tuple[str, ...]
    objects: tuple[PrebuiltObject, ...]

    def targets(self) -> list[str]:
        return sorted({o.target for o in self.objects})

    def find(self, arch: str, kernel_set: str) -> PrebuiltObject | None:
        for o in self.objects:
            if o.target == base_arch(arch) and o.kernel_set == kernel_set:
                return o
        return None

    def covers(self, arch: str) -> bool:
        return any(o.target == base_arch(arch) for o in self.objects)


def load_manifest(root: Path = PREBUILT_DIR) -> Manifest | None:
    """The manifest under `root`, or None when nothing was built (a source checkout before the build step).
    A manifest that cannot be read is treated as absent: the runtime compiler remains the fallback."""
    try:
        data = json.loads((root / MANIFEST).read_text())
        cov, compiler = int(data["code_object_version"]), str(data["compiler"])
        objects = tuple(
            PrebuiltObject(o["target"], o["kernel_set"], root / o["path"], cov, compiler, o["source_sha256"],
                           tuple(o["kernels"]))
            for o in data["objects"])
        return Manifest(root, cov, compiler, tuple(data["options"]), objects)
    except (OSError, ValueError, KeyError, TypeError):
        return None
