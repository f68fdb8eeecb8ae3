"""Checks on a built AMDGPU code object, read with LLVM's own tools (no new dependency):
`llvm-readelf --notes` prints the AMDGPU metadata note (target, kernels, their arguments) as YAML and
`llvm-readelf --symbols` the symbol table. Used by the build step and by the tests."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

LLVM_SUFFIX = "-19"       # Debian's versioned tool names; the build and CI use clang-19 / lld-19 / llvm-19


def tool(name: str) -> str:
    return name + LLVM_SUFFIX


@dataclass(frozen=True)
class KernelArg:
    offset: int
    size: int
    value_kind: str           # "global_buffer" (a pointer), "by_value", or a hidden_* argument


@dataclass(frozen=True)
class KernelInfo:
    name: str
    args: tuple[KernelArg, ...]         # the explicit arguments, in order (hidden ones dropped)


@dataclass(frozen=True)
class ObjectInfo:
    target: str                          # e.g. "amdgcn-amd-amdhsa--gfx1151"
    code_object_version: int             # from the ELF header: ABI version 2/3/4 = code object v4/v5/v6
    kernels: dict[str, KernelInfo]
    defined_symbols: frozenset[str]
    undefined_symbols: frozenset[str]


def _run(args: list[str]) -> str:
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


def metadata(path: Path) -> dict:
    """The AMDGPU metadata note as a dict (the YAML document between '---' and '...')."""
    text = _run([tool("llvm-readelf"), "--notes", str(path)])
    match = re.search(r"---[ \t]*\n(.*?)^\.\.\.[ \t]*$", text, re.S | re.M)
    if not match:
        raise RuntimeError(f"{path}: no AMDGPU metadata note in llvm-readelf --notes output")
    return yaml.safe_load(match.group(1))


def symbols(path: Path) -> tuple[set[str], set[str]]:
    """(defined, undefined) symbol names from the ELF symbol table."""
    text = _run([tool("llvm-readelf"), "--symbols", "--wide", str(path)])
    defined, undefined = set(), set()
    for line in text.splitlines():
        parts = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(parts) >= 8 and parts[0].endswith(":") and parts[0][:-1].isdigit() and parts[7]:
            (undefined if parts[6] == "UND" else defined).add(parts[7])
    return defined, undefined


def read_object(path: Path) -> ObjectInfo:
    meta = metadata(path)
    kernels = {}
    for k in meta.get("amdhsa.kernels", []):
        args = tuple(KernelArg(int(a[".offset"]), int(a[".size"]), str(a[".value_kind"]))
                     for a in k.get(".args", []) if not str(a[".value_kind"]).startswith("hidden_"))
        kernels[k[".name"]] = KernelInfo(k[".name"], args)
    defined, undefined = symbols(path)
    header = _run([tool("llvm-readelf"), "--file-header", str(path)])
    abi = re.search(r"ABI Version:\s*(\d+)", header)
    version = int(abi.group(1)) + 2 if abi else 0
    return ObjectInfo(str(meta.get("amdhsa.target", "")), version, kernels, frozenset(defined),
                      frozenset(undefined))


def problems(info: ObjectInfo, target: str, expected_kernels: list[str], code_object_version: int) -> list[str]:
    """Everything wrong with an object built for `target` that should hold `expected_kernels`; [] = good."""
    found = []
    if info.code_object_version != code_object_version:
        found.append(f"code object v{info.code_object_version}, expected v{code_object_version}")
    if not info.target.endswith("--" + target):
        found.append(f"arch note is {info.target!r}, expected amdgcn-amd-amdhsa--{target}")
    for name in expected_kernels:
        if name not in info.kernels:
            found.append(f"kernel {name} missing from the metadata")
        if name not in info.defined_symbols or name + ".kd" not in info.defined_symbols:
            found.append(f"kernel symbol {name} (or its descriptor {name}.kd) missing")
    if info.undefined_symbols:
        found.append("undefined symbols: " + ", ".join(sorted(info.undefined_symbols)))
    return found


def expected_kernels(source: str) -> list[str]:
    """Kernel names a source defines: `HALO_KERNEL ... void name(` lines plus `X_ENTRY(name, ...)` macro
    instantiations (a macro's own `void NAME(` is skipped)."""
    names = re.findall(r"HALO_KERNEL\s+(?:__launch_bounds__\([^)]*\)\s*)?void\s+(\w+)\s*\(", source)
    names += re.findall(r"^\s*[A-Z_]+_ENTRY\(\s*(\w+)\s*,", source, re.M)
    return sorted({n for n in names if not n.isupper()})
