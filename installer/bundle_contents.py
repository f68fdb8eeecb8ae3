"""What goes into the bundle, computed, so that adding a backend or a kernel cannot silently drop it.

The PyInstaller spec (installer/halo-chat.spec) is a thin shell over these functions; tests import them
without building anything.

- Hidden imports: every module the backend registry names (engine.backends.registry: the backend and
  binding modules are imported by name at run time, so PyInstaller's import scan cannot see them), every
  other engine module (lazy imports), plus
  the runtime bindings' compiled submodules that are linked at C level (hip-python's `rocm.bindings`
  and `rocm.bindings.util`; cuda-python's `cuda.bindings`), collected when they are installed.
- Data files: the kernel sources (engine/backends/kernels/*.cu and the headers they include), the prebuilt
  HIP code objects and their manifest (`python -m engine.backends.kernels.build`: what lets the GPU path start
  on a Windows driver without hiprtc), the app's assets (styles, icons) and VERSION.txt.
- After analysis, `check_analysis` fails the build if any registry module is missing from the bundle.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP_NAME = "Halo Chat"
EXE_NAME = "HaloChat"              # the executable and the bundle folder (no space: easier in scripts)
PUBLISHER = "Halo Chat contributors"
ICON = ROOT / "assets" / "icons" / "halo.ico"

# Packages the app never uses at run time; some are installed in dev environments and would be pulled
# in through optional imports (numpy and jinja2 probe for several of them).
EXCLUDES = [
    "torch", "tensorflow", "jax", "transformers", "llama_cpp", "scipy", "pandas", "matplotlib", "sympy",
    "IPython", "jupyter", "notebook", "tkinter", "_tkinter",
    "pytest", "_pytest", "pytestqt", "hypothesis", "ruff", "PyInstaller", "pip", "setuptools", "wheel",
    "tests", "numpy.tests", "numpy.testing._private.extbuild",
]

ASSET_SUFFIXES = {".qss", ".ico", ".png", ".svg"}   # not the generator scripts kept beside them

# Binding packages whose submodules are imported from C or by name at run time (invisible to the import
# scan); cuda.bindings finds its libraries through cuda.pathfinder, imported lazily.
NATIVE_BINDING_PACKAGES = ["rocm.bindings", "rocm.bindings.util", "cuda.bindings", "cuda.pathfinder"]


def version() -> str:
    """The app's version: engine.__version__, which pyproject.toml reads too (one place)."""
    sys.path.insert(0, str(ROOT))
    import engine

    return engine.__version__


def registry_modules() -> list[str]:
    """Every module the backend registry names (backend implementations and runtime bindings), plus the
    registry's own hidden_imports() list. The build fails unless all of these are in the bundle."""
    sys.path.insert(0, str(ROOT))
    from engine.backends.registry import BACKENDS, hidden_imports

    mods = set(hidden_imports())
    for spec in BACKENDS.values():
        mods.update(m for m in (spec.module, spec.binding_module) if m)
    return sorted(mods)


def installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def native_binding_imports() -> list[str]:
    """Submodules of the compiled runtime bindings that are installed here (none on a plain CPU box)."""
    from PyInstaller.utils.hooks import collect_submodules

    mods: list[str] = []
    for package in NATIVE_BINDING_PACKAGES:
        if installed(package):
            mods += [package] + collect_submodules(package, filter=_runtime_module)
    if installed("hip"):
        mods.append("hip")          # its `hip`, `hiprtc` are attributes re-exported from rocm.bindings
    return sorted(set(mods))


def _runtime_module(name: str) -> bool:
    return ".tests" not in name and "_example_helpers" not in name


def engine_modules() -> list[str]:
    """Every module of the engine package: it is small, pure Python and imports lazily in places (GPU
    forward, diagnostics), so all of it goes in rather than what the import scan happens to see."""
    from PyInstaller.utils.hooks import collect_submodules
    return collect_submodules("engine")


def hidden_imports() -> list[str]:
    return sorted(set(registry_modules()) | set(engine_modules()) | set(native_binding_imports()))


def kernel_sources() -> list[Path]:
    kernels = ROOT / "engine" / "backends" / "kernels"
    return sorted([*kernels.glob("*.cu"), *kernels.glob("*.h")])


def prebuilt_objects() -> list[tuple[str, str]]:
    """(file, folder inside the bundle) for the manifest and every object it lists; [] when nothing was built."""
    sys.path.insert(0, str(ROOT))
    from engine.backends.kernels.prebuilt import MANIFEST, PREBUILT_DIR, load_manifest

    manifest = load_manifest(PREBUILT_DIR)
    if manifest is None:
        return []
    dest = "engine/backends/kernels/prebuilt"
    return [(str(PREBUILT_DIR / MANIFEST), dest)] + [
        (str(o.path), f"{dest}/{o.path.parent.relative_to(PREBUILT_DIR).as_posix()}") for o in manifest.objects]


def datas(version_file: Path) -> list[tuple[str, str]]:
    """(source, folder inside the bundle) pairs."""
    pairs = [(str(p), "engine/backends/kernels") for p in kernel_sources()] + prebuilt_objects()
    for folder in ("styles", "icons"):
        for p in sorted((ROOT / "assets" / folder).glob("*")):
            if p.is_file() and p.suffix in ASSET_SUFFIXES:
                pairs.append((str(p), f"assets/{folder}"))
    pairs.append((str(version_file), "."))
    return pairs


def write_version_file(workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "VERSION.txt"
    path.write_text(version() + "\n", encoding="utf-8")
    return path


def windows_version_info():
    """The EXE's Windows version resource (Explorer > Properties > Details), from pyproject's version.
    Windows only: PyInstaller's versioninfo needs pefile, which it installs only there."""
    from PyInstaller.utils.win32 import versioninfo as vi

    numbers = tuple(int(x) for x in re.findall(r"\d+", version())[:4])
    numbers = numbers + (0,) * (4 - len(numbers))
    text = version()
    strings = vi.StringTable("040904B0", [
        vi.StringStruct("CompanyName", PUBLISHER), vi.StringStruct("FileDescription", APP_NAME),
        vi.StringStruct("FileVersion", text), vi.StringStruct("InternalName", EXE_NAME),
        vi.StringStruct("OriginalFilename", f"{EXE_NAME}.exe"), vi.StringStruct("ProductName", APP_NAME),
        vi.StringStruct("ProductVersion", text), vi.StringStruct("LegalCopyright", "MIT License"),
    ])
    return vi.VSVersionInfo(
        ffi=vi.FixedFileInfo(filevers=numbers, prodvers=numbers, mask=0x3F, flags=0x0, OS=0x40004,
                          fileType=0x1, subtype=0x0, date=(0, 0)),
        kids=[vi.StringFileInfo([strings]), vi.VarFileInfo([vi.VarStruct("Translation", [0x0409, 1200])])],
    )


def check_analysis(pure_names: list[str]) -> None:
    """Raises SystemExit naming every registry module the analysis did not put in the bundle."""
    missing = [m for m in registry_modules() if m not in set(pure_names)]
    if missing:
        raise SystemExit(f"bundle is missing backend registry modules: {', '.join(missing)}")
