"""Every kernel source through a real HIP compiler, no GPU needed: Debian's ROCm 5.2 libamdhip64 carries
hiprtc, which compiles for gfx1030 (RDNA2, wave32 like the Strix Halo's gfx1151, which that old compiler
does not know). This checks the HIP side of the shared dialect (prelude.h) that the H200 runs as CUDA:
every kernel the forward pass launches must come out of hiprtc as a symbol of the code object. Skips where
no HIP runtime with a compiler is installed (.ci/run installs one)."""
from __future__ import annotations

import re

import pytest

from engine.backends import kernels
from engine.backends.kernels.objcheck import expected_kernels
from engine.backends.runtime.ctypes_runtime import CtypesRuntime
from engine.errors import BackendError

ARCH = "gfx1030"
FILES = kernels.kernel_files()


def kernel_names(source: str) -> list[str]:
    return expected_kernels(source)


@pytest.fixture(scope="module")
def hip():
    rt = CtypesRuntime("hip")
    try:
        rt.load()
    except (BackendError, OSError) as e:
        pytest.skip(f"no HIP runtime: {e}")
    if rt.rtc_library_path.startswith("not loaded"):
        pytest.skip(f"no hiprtc: {rt.rtc_library_path}")
    return rt


@pytest.mark.parametrize("file", FILES)
def test_every_kernel_compiles_for_rdna_through_hiprtc(hip, file):
    names = kernel_names((kernels.KERNEL_DIR / file).read_text())
    assert names, f"no kernels found in {file}"
    code = hip.compile(kernels.source(file), file, hip.compile_options(ARCH))
    assert code[:4] == b"\x7fELF" or b"__CLANG_OFFLOAD_BUNDLE__" in code[:64], code[:64]
    missing = [n for n in names if n.encode() not in code]
    assert not missing, f"{file}: not in the {ARCH} code object: {missing}"


def test_the_forward_pass_only_launches_kernels_that_exist():
    """Every kernel name engine.gpu.forward asks for is defined in the sources compiled above."""
    import inspect

    import engine.gpu.forward as fwd
    defined = {n for f in FILES for n in kernel_names((kernels.KERNEL_DIR / f).read_text())}
    src = inspect.getsource(fwd)
    asked = set(re.findall(r'"(halo_\w+)"', src))
    suffixes = ("r1_t1", "r1_t4", "r4_t8", "kq_t1", "gt", "tc", "mv_t1")
    asked |= {"halo_matmul_" + s for s in suffixes} | {"halo_glu_" + s for s in suffixes}
    asked = {a for a in asked if not a.endswith("_")}
    assert asked <= defined, asked - defined
