"""`python installer/build.py`: build the Halo Chat bundle (PyInstaller) and its installer (NSIS).

    python installer/build.py                   bundle + installer, into dist/
    python installer/build.py --bundle-only     just the PyInstaller folder (dist/HaloChat)
    python installer/build.py --installer-only [--bundle DIR]   wrap an existing folder (any payload)

On Windows this makes the real installer, dist/HaloChat-Setup-<version>.exe. PyInstaller cannot
cross-build, so on Linux it builds the LINUX bundle and compiles the NSIS script around it: that checks
the installer script (pages, sections, defines, file list), not a Windows bundle; the output file is
named accordingly and must never be shipped.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from installer import bundle_contents as contents  # noqa: E402
from installer.entry import FORGET_SECRETS  # noqa: E402

SPEC = ROOT / "installer" / "halo-chat.spec"
NSIS_SCRIPT = ROOT / "installer" / "nsis" / "halo-chat.nsi"
WINDOWS = sys.platform == "win32"


@dataclass(frozen=True)
class Bundle:
    folder: Path
    executable: Path
    seconds: float
    size_bytes: int
    files: int

    @staticmethod
    def measure(folder: Path, seconds: float = 0.0) -> Bundle:
        files = [p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()]
        executable = folder / (contents.EXE_NAME + (".exe" if WINDOWS else ""))
        return Bundle(folder, executable, seconds, sum(p.stat().st_size for p in files), len(files))

    def summary(self) -> str:
        return (f"bundle: {self.folder} ({self.size_bytes / 2**20:.1f} MiB, {self.files} files), "
                f"built in {self.seconds:.1f} s")


def build_bundle(dist: Path, work: Path) -> Bundle:
    """Runs PyInstaller on the spec. Raises CalledProcessError if it fails (its log went to stderr)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "PyInstaller", "--noconfirm", "--log-level", "WARN",
                    "--distpath", str(dist), "--workpath", str(work), str(SPEC)], check=True, cwd=ROOT)
    return Bundle.measure(dist / contents.EXE_NAME, time.perf_counter() - start)


def find_makensis() -> str:
    candidates = [shutil.which("makensis")]
    if WINDOWS:
        for base in (os.environ.get("ProgramFiles(x86)"), os.environ.get("ProgramFiles")):
            if base:
                candidates.append(str(Path(base) / "NSIS" / "makensis.exe"))
    for c in candidates:
        if c and Path(c).is_file():
            return c
    raise SystemExit("makensis not found: install NSIS (Windows: `choco install nsis`; Debian: "
                     "`apt-get install nsis`)")


def installer_name(version: str) -> str:
    if WINDOWS:
        return f"HaloChat-Setup-{version}.exe"
    return f"HaloChat-Setup-{version}-script-check-NOT-FOR-WINDOWS.exe"


def version_quad(version: str) -> str:
    """NSIS's VIProductVersion needs exactly four numbers: 0.1.0 -> 0.1.0.0, 1.2.3rc1 -> 1.2.3.1."""
    import re
    numbers = [int(x) for x in re.findall(r"\d+", version)][:4]
    return ".".join(str(n) for n in numbers + [0] * (4 - len(numbers)))


def makensis_command(bundle_folder: Path, out: Path, version: str | None = None,
                     check_only: bool = not WINDOWS, amd64: bool = False) -> list[str]:
    """The makensis command line that compiles the NSIS script around `bundle_folder` into `out` (run it in
    NSIS_SCRIPT's folder). `check_only` (default off Windows) stores the files uncompressed: same script,
    seconds not minutes. `amd64`: a 64-bit installer stub instead of the usual 32-bit one (both install the
    same files)."""
    version = version or contents.version()
    defines = {"VERSION": version, "VERSION_QUAD": version_quad(version), "BUNDLE_DIR": str(bundle_folder),
               "OUTFILE": str(out), "ICON": str(contents.ICON), "EXE_NAME": contents.EXE_NAME,
               "FORGET_SECRETS_FLAG": FORGET_SECRETS}
    flags = [f"-D{k}={v}" for k, v in defines.items()]
    flags += ["-DCHECK_ONLY"] if check_only else []
    flags += ["-DTARGET_AMD64"] if amd64 else []
    return [find_makensis(), "-V2", "-WX", *flags, str(NSIS_SCRIPT)]


def build_installer(bundle_folder: Path, out: Path, version: str | None = None,
                    check_only: bool = not WINDOWS, amd64: bool = False) -> Path:
    """Compiles the NSIS script around `bundle_folder` (makensis_command). Returns the setup's path."""
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(makensis_command(bundle_folder, out, version, check_only, amd64), check=True,
                   cwd=NSIS_SCRIPT.parent)
    return out


def check_prebuilt_kernels(required: bool) -> None:
    """The bundle carries the prebuilt HIP code objects (engine.backends.kernels.prebuilt): a stock Windows AMD
    driver has no runtime compiler, so without them the GPU path never starts there. `required` (a real
    installer, or HALO_REQUIRE_PREBUILT=1): refuse to build without them; else say so."""
    if contents.prebuilt_objects():
        return
    missing = ("there are no prebuilt HIP kernels in engine/backends/kernels/prebuilt (build them on Linux with "
               "`python -m engine.backends.kernels.build`, or take the windows-installer workflow's "
               "prebuilt-kernels artifact)")
    if required:
        raise SystemExit(f"Refusing to build the bundle: {missing}.")
    print(f"WARNING: {missing}; this bundle's GPU path would need a runtime compiler.", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python installer/build.py", description=__doc__.split("\n\n")[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--bundle-only", action="store_true", help="only the PyInstaller folder")
    mode.add_argument("--installer-only", action="store_true", help="only the installer, around --bundle")
    p.add_argument("--dist", default=str(ROOT / "dist"), help="output folder (default: dist/)")
    p.add_argument("--work", default=str(ROOT / "build" / "pyinstaller"), help="PyInstaller's work folder")
    p.add_argument("--bundle", help="the folder to wrap with --installer-only (default: <dist>/HaloChat)")
    p.add_argument("--amd64-installer", action="store_true", help="a 64-bit installer stub (default 32-bit)")
    p.add_argument("--compress", action="store_true", help="compress as on Windows even for a script check")
    args = p.parse_args(argv)
    dist = Path(args.dist).resolve()
    version = contents.version()
    print(f"Halo Chat {version} on {sys.platform}")

    bundle_folder = Path(args.bundle).resolve() if args.bundle else dist / contents.EXE_NAME
    if not args.installer_only:
        check_prebuilt_kernels(required=WINDOWS or os.environ.get("HALO_REQUIRE_PREBUILT") == "1")
        bundle = build_bundle(dist, Path(args.work).resolve())
        bundle_folder = bundle.folder
        print(bundle.summary())
        if args.bundle_only:
            return 0
    if not WINDOWS:
        print("NOTE: PyInstaller cannot cross-build. This is the LINUX bundle wrapped by the NSIS script: it "
              "checks that the installer script compiles around a real file tree, it is NOT a Windows "
              "installer. Build on Windows (or the windows-installer workflow) for the real one.")
    start = time.perf_counter()
    setup = build_installer(bundle_folder, dist / installer_name(version), version,
                            check_only=not (WINDOWS or args.compress), amd64=args.amd64_installer)
    print(f"installer: {setup} ({setup.stat().st_size / 2**20:.1f} MiB), "
          f"compiled in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
