"""Run SIMT kernels of engine/backends/kernels on the CPU (tests only): the kernel file, with prelude.h, compiles
as C++ against cpu_simt.h, and cpu_simt_run.cpp runs a launch's blocks one after another, each block's threads as
OS threads meeting at barriers (__syncthreads: the block's; shuffles and __syncwarp: the warp's). It runs the
kernels' own source, so their index arithmetic, masks and shared-memory phases are exercised without a GPU; it
says nothing about speed. NVIDIA tensor-core code (HALO_TC) compiles with tensor_cores=True, its mma.sync, ldmatrix
and cp.async done by cpu_simt_run.cpp as the PTX ISA defines them; RDNA3's WMMA tile compiles with arch="gfx1151"
(clang), its v_wmma_f32_16x16x16_f16 done as AMD documents the operands.

    lib = build("halo_layer.cu", {"halo_attention_ts_d64": ATTENTION_TILE_ARGS})
    launch(lib, "halo_attention_ts_d64", (gx, gy), 128, [arrays and numpy scalars in the kernel's order])
Needs a C++20 compiler (g++ or clang++); `compiler()` is None where there is none.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from engine.backends.kernels import KERNEL_DIR

HERE = Path(__file__).resolve().parent
CACHE = Path(tempfile.gettempdir()) / "halo-cpu-simt"


def compiler() -> str | None:
    return next((name for name in ("g++", "clang++", "clang++-19") if shutil.which(name)), None)


def clang() -> str | None:
    """clang++ (the RDNA paths' vector types and _Float16 need it): CI installs clang-19."""
    return next((name for name in ("clang++-19", "clang++") if shutil.which(name)), None)


def build(file: str, kernels: dict[str, list[str]], arch: str | None = None, tensor_cores: bool = False) -> ctypes.CDLL:
    """The kernel file as a shared library with a call_NAME(void** args) per kernel: `kernels` maps each name to
    its parameters' C types, in order (the wrapper dereferences one pointer per argument). arch: a GPU target whose
    code paths to compile (e.g. "gfx1151": the RDNA3 WMMA tile, on the harness's v_wmma emulation; needs clang).
    tensor_cores: compile the HALO_TC kernels too, on the harness's mma.sync / ldmatrix / cp.async."""
    src = "#include \"cpu_simt.h\"\n" + (KERNEL_DIR / "prelude.h").read_text() + f'\n#line 1 "{file}"\n'
    src += (KERNEL_DIR / file).read_text().replace("extern __shared__ float sm[];",
                                                   "float* sm = halo_cpu_dynamic_shared;")
    for name, types in kernels.items():
        args = ", ".join(f"*({t}*)a[{i}]" for i, t in enumerate(types))
        src += f'\nextern "C" void call_{name}(void** a) {{ {name}({args}); }}\n'
    runner = (HERE / "cpu_simt_run.cpp").read_text()
    key = hashlib.sha256((src + runner + (HERE / "cpu_simt.h").read_text() + str(arch) + str(tensor_cores)).encode()).hexdigest()[:16]
    CACHE.mkdir(exist_ok=True)
    lib = CACHE / f"{Path(file).stem}-{key}.so"
    if not lib.exists():
        cc = clang() if arch else compiler()
        if cc is None:
            raise RuntimeError("no C++ compiler (g++ or clang++; clang for a GPU arch) to build the CPU kernel harness")
        work = Path(tempfile.mkdtemp(dir=CACHE))
        (work / "kernels.cpp").write_text(src)
        defines = ([f"-D__{arch}__"] if arch else []) + (["-DHALO_CPU_SIM_TC"] if tensor_cores else [])
        subprocess.run([cc, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-DHALO_CPU_SIM", *defines, f"-I{HERE}",
                        str(work / "kernels.cpp"), str(HERE / "cpu_simt_run.cpp"), "-o", str(work / "lib.so")],
                       check=True, capture_output=True, text=True)
        os.replace(work / "lib.so", lib)
        shutil.rmtree(work, ignore_errors=True)
    return ctypes.CDLL(str(lib))


def launch(lib: ctypes.CDLL, name: str, grid: tuple[int, ...], threads: int, args: list) -> None:
    """args: numpy arrays (passed as pointers to their data; outputs are written in place), None (a null
    pointer), or numpy scalars (passed by value, their own width)."""
    keep, slots = [], []
    for a in args:
        if a is None:
            value = ctypes.c_void_p(0)
        elif isinstance(a, np.ndarray):
            assert a.flags.c_contiguous
            value = ctypes.c_void_p(a.ctypes.data)
        else:
            value = np.ctypeslib.as_ctypes(np.asarray(a).reshape(1))
        keep.append(value)
        slots.append(ctypes.cast(ctypes.pointer(value), ctypes.c_void_p))
    packed = (ctypes.c_void_p * len(slots))(*[s.value for s in slots])
    call = ctypes.cast(getattr(lib, f"call_{name}"), ctypes.c_void_p)
    gx, gy, gz = (tuple(grid) + (1, 1))[:3]
    lib.halo_cpu_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p] + [ctypes.c_uint] * 4
    lib.halo_cpu_launch(call, packed, gx, gy, gz, threads)


def wmma_unreplicated(lib: ctypes.CDLL) -> int:
    """WMMA calls so far where lanes 16-31 did not repeat lanes 0-15's A or B operands (RDNA3 requires it)."""
    return ctypes.c_longlong.in_dll(lib, "halo_cpu_wmma_unreplicated").value

