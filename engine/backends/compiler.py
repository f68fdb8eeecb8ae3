"""Runtime kernel compilation with an on-disk cache.

Key: (api, arch, options, compiler + runtime version, source hash). The arch is the device's own
(gcnArchName / compute capability), never a constant. Entries are written atomically (tmp + rename), so
a crash mid-write leaves no half file; a corrupt or unreadable entry is simply compiled again.
"""
from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

from .. import paths
from .runtime.binding import RuntimeBinding


@dataclass
class Compiled:
    code: bytes
    seconds: float
    from_cache: bool
    path: Path
    prebuilt: bool = False      # shipped with the app (kernels/prebuilt), not compiled on this machine


def cache_key(api: str, arch: str, options: list[str], versions: str, source: str) -> str:
    source_hash = hashlib.sha256(source.encode()).hexdigest()
    material = "\n".join([api, arch, " ".join(options), versions, source_hash])
    return hashlib.sha256(material.encode()).hexdigest()[:40]


class KernelCompiler:
    def __init__(self, binding: RuntimeBinding, arch: str, cache_root: Path | None = None):
        self.binding = binding
        self.arch = arch
        self.cache_root = cache_root or (paths.cache_dir() / "kernels")
        self._versions: str | None = None

    def versions(self) -> str:
        if self._versions is None:
            self._versions = f"{self.binding.rtc_version()} runtime {self.binding.runtime_version()}"
        return self._versions

    def compile(self, source: str, filename: str) -> Compiled:
        options = self.binding.compile_options(self.arch)
        key = cache_key(self.binding.api, self.arch, options, self.versions(), source)
        path = self.cache_root / f"{self.binding.api}-{self.arch}-{key}.bin"
        try:
            code = path.read_bytes()
            if code:
                return Compiled(code, 0.0, True, path)
        except OSError:
            pass
        start = time.perf_counter()
        code = self.binding.compile(source, filename, options)
        seconds = time.perf_counter() - start
        try:
            self.cache_root.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(code)
            os.replace(tmp, path)
        except OSError:
            pass     # a read-only cache only costs a recompile next time
        return Compiled(code, seconds, False, path)
