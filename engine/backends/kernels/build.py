"""Compile every kernel file ahead of time for the RDNA targets: `python -m engine.backends.kernels.build`.

Same sources as the runtime path (kernels.source(file): prelude.h + the file), prefixed by the HIP header
that hiprtc would otherwise provide. One code object per (target, kernel file) under prebuilt/, described
by prebuilt/manifest.json, each checked with llvm-readelf (arch note, every kernel present, no undefined
symbols). Objects whose source, options and compiler are unchanged are kept (the manifest is the cache).

Needs clang-19, lld-19, llvm-19, libamdhip64-dev and rocm-device-libs (Debian). Debian's device libraries
stop at gfx10: for each target without an oclc_isa_version_<n>.bc we make one in a temp folder from the
gfx1030 file by rewriting its single constant, __oclc_ISA_version (see `device_libs`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import kernel_files, source
from .objcheck import expected_kernels, problems, read_object, tool
from .prebuilt import HEADER, MANIFEST, PREBUILT_DIR, TARGETS, sha256, source_sha256

# Code object v5: the default of ROCm 6.x/7.x compilers and of clang 19, loaded by every ROCm 6.x/7.x runtime
# (the Windows HIP runtime in the Adrenalin driver included; v4 is deprecated there, v6 needs the ROCm 6.2+
# loader and Debian ships no oclc_abi_version_600.bc). -O3 and -std=c++17 match what hiprtc gets; wave32 is
# RDNA's default. No -fgpu-rdc: each object is a fully linked, self-contained module for hipModuleLoadData.
CODE_OBJECT_VERSION = 5
DEVICE_LIB_DIRS = (Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"), Path("/usr/lib/llvm-19/lib/clang/19/amdgcn/bitcode"),
                   Path("/opt/rocm/amdgcn/bitcode"))


def options(target: str, device_lib_dir: Path | None = None) -> list[str]:
    opts = ["-x", "hip", f"--offload-arch={target}", "--cuda-device-only", "--no-gpu-bundle-output", "-O3",
            "-std=c++17", f"-mcode-object-version={CODE_OBJECT_VERSION}", "--rocm-path=/usr"]
    return opts + ([f"--rocm-device-lib-path={device_lib_dir}"] if device_lib_dir else [])


def compiler_version() -> str:
    """'clang 19.1.7' from `clang-19 --version`."""
    first = subprocess.run([tool("clang"), "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"clang version (\S+)", first)
    return f"clang {match.group(1)}" if match else first.splitlines()[0]


def isa_version(target: str) -> int:
    """gfx<major><minor><stepping> -> the device libraries' number: gfx1151 -> 11501, gfx1030 -> 10300."""
    digits = target.removeprefix("gfx")
    return int(digits[:-2]) * 1000 + int(digits[-2], 16) * 100 + int(digits[-1], 16)


def find_device_libs() -> Path:
    for d in DEVICE_LIB_DIRS:
        if (d / "ocml.bc").is_file():
            return d
    raise SystemExit("no AMD device libraries (ocml.bc) in " + ", ".join(map(str, DEVICE_LIB_DIRS)) +
                     ": apt-get install rocm-device-libs")


def device_libs(work: Path, targets: list[str]) -> Path:
    """A folder with the system's device libraries plus oclc_isa_version_<n>.bc for every target lacking one,
    made from the gfx1030 file with the constant replaced (the file holds nothing else)."""
    system = find_device_libs()
    out = work / "bitcode"
    out.mkdir()
    for f in system.glob("*.bc"):
        (out / f.name).symlink_to(f)
    template = subprocess.run([tool("llvm-dis"), str(system / "oclc_isa_version_1030.bc"), "-o", "-"],
                              capture_output=True, text=True, check=True).stdout
    for target in targets:
        name = f"oclc_isa_version_{target.removeprefix('gfx')}.bc"
        if (out / name).exists():
            continue
        text, n = re.subn(r"(@__oclc_ISA_version = .* i32 )10300\b", rf"\g<1>{isa_version(target)}", template)
        if n != 1:
            raise SystemExit("unexpected oclc_isa_version_1030.bc layout: __oclc_ISA_version not found once")
        ll = work / f"isa_{target}.ll"
        ll.write_text(text)
        subprocess.run([tool("llvm-as"), str(ll), "-o", str(out / name)], check=True)
    return out


def compile_one(target: str, kernel_set: str, libs: Path, out_dir: Path, work: Path) -> tuple[dict, float]:
    """Compile and check one object. Returns (its manifest entry, seconds). Raises SystemExit on failure."""
    text = HEADER + source(kernel_set)
    src = work / f"{target}-{kernel_set}"
    src.write_text(text)
    obj = out_dir / target / (Path(kernel_set).stem + ".hsaco")
    obj.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    done = subprocess.run([tool("clang"), *options(target, libs), str(src), "-o", str(obj)],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{kernel_set} for {target}: clang failed\n{done.stderr}")
    names = expected_kernels(text)
    found = problems(read_object(obj), target, names, CODE_OBJECT_VERSION)
    if found:
        raise SystemExit(f"{obj}: " + "; ".join(found))
    entry = {"target": target, "kernel_set": kernel_set, "path": f"{target}/{obj.name}",
             "source_sha256": sha256(text.encode()), "object_sha256": sha256(obj.read_bytes()), "kernels": names}
    return entry, seconds


def _reusable(old: dict | None, compiler: str, out_dir: Path) -> dict[tuple[str, str], dict]:
    """Entries of the previous manifest still valid: same compiler and options, object present and intact."""
    if not old or old.get("compiler") != compiler or old.get("code_object_version") != CODE_OBJECT_VERSION \
            or old.get("options") != options("TARGET"):
        return {}
    keep = {}
    for e in old.get("objects", []):
        path = out_dir / e["path"]
        if path.is_file() and sha256(path.read_bytes()) == e["object_sha256"]:
            keep[(e["target"], e["kernel_set"])] = e
    return keep


def build(out_dir: Path = PREBUILT_DIR, targets: list[str] | None = None, jobs: int | None = None) -> dict:
    targets = list(targets or TARGETS)
    compiler = compiler_version()
    try:
        old = json.loads((out_dir / MANIFEST).read_text())
    except (OSError, ValueError):
        old = None
    reusable = _reusable(old, compiler, out_dir)
    work_items, entries = [], {}
    for target in targets:
        for kernel_set in kernel_files():
            e = reusable.get((target, kernel_set))
            if e and e["source_sha256"] == source_sha256(kernel_set):
                entries[(target, kernel_set)] = e
            else:
                work_items.append((target, kernel_set))
    start = time.perf_counter()
    if work_items:
        with tempfile.TemporaryDirectory(prefix="halo-kernels-") as tmp:
            libs = device_libs(Path(tmp), targets)
            with ThreadPoolExecutor(jobs or os.cpu_count() or 1) as pool:
                results = pool.map(lambda item: compile_one(*item, libs, out_dir, Path(tmp)), work_items)
                for item, (entry, seconds) in zip(work_items, results, strict=True):
                    entries[item] = entry
                    print(f"  {item[0]:8} {item[1]:20} {seconds:6.1f} s", flush=True)
    manifest = {"code_object_version": CODE_OBJECT_VERSION, "compiler": compiler, "options": options("TARGET"),
                "objects": [entries[k] for k in sorted(entries)]}
    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in out_dir.glob("*/*.hsaco"):     # kernel files or targets that no longer exist
        if stale.relative_to(out_dir).as_posix() not in {e["path"] for e in manifest["objects"]}:
            stale.unlink()
    tmp_manifest = out_dir / (MANIFEST + ".tmp")
    tmp_manifest.write_text(json.dumps(manifest, indent=1))
    os.replace(tmp_manifest, out_dir / MANIFEST)
    print(f"{len(manifest['objects'])} code objects ({len(work_items)} compiled in "
          f"{time.perf_counter() - start:.1f} s, {len(manifest['objects']) - len(work_items)} unchanged) "
          f"for {', '.join(targets)} with {compiler}, code object v{CODE_OBJECT_VERSION}, in {out_dir}")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine.backends.kernels.build", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=PREBUILT_DIR)
    parser.add_argument("--target", action="append", help="a gfx target (repeatable); default: all of " +
                        ", ".join(TARGETS))
    parser.add_argument("-j", "--jobs", type=int)
    args = parser.parse_args(argv)
    if shutil.which(tool("clang")) is None:
        print(f"{tool('clang')} not found: apt-get install clang-19 lld-19 llvm-19 libamdhip64-dev "
              "rocm-device-libs", file=sys.stderr)
        return 2
    build(args.out, args.target, args.jobs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
