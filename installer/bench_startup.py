"""`python installer/bench_startup.py [--bundle DIR] [--runs N] [--source]`: how long the frozen app takes
from launch to a usable window (visible and exposed), offscreen, with a fresh data folder.

Prints per run: launch -> entry (the bootloader and Python start), entry -> window (imports, Qt, the main
window), and the total; then the best and the median. `--source` measures `python -m installer.entry`
instead, for comparison. A benchmark command, not a test: the figures depend on the machine and its load.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def one_run(cmd: list[str], models_dir: str) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="halo-bench-") as tmp:
        marker = Path(tmp) / "ready.txt"
        env = dict(os.environ, HALO_STARTUP_BENCH=str(marker), HALO_DATA_DIR=str(Path(tmp) / "data"),
                   HALO_CACHE_DIR=str(Path(tmp) / "cache"), HALO_MODELS_DIR=models_dir)
        env.setdefault("QT_QPA_PLATFORM", "offscreen")
        launched = time.time()
        subprocess.run(cmd + ["--settings-dir", str(Path(tmp) / "settings")], env=env, check=True, cwd=ROOT,
                       timeout=300, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        entry, window = (float(x) for x in marker.read_text().split())
        return entry - launched, window - entry


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python installer/bench_startup.py")
    p.add_argument("--bundle", default=str(ROOT / "dist" / "HaloChat"), help="the PyInstaller folder")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--source", action="store_true", help="run from source instead of the bundle")
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from engine.paths import models_dir

    if args.source:
        cmd = [sys.executable, "-m", "installer.entry"]      # from the repository root
    else:
        exe = Path(args.bundle) / ("HaloChat.exe" if sys.platform == "win32" else "HaloChat")
        cmd = [str(exe)]
    print(f"start-up to a usable window: {' '.join(cmd)} ({os.environ.get('QT_QPA_PLATFORM', 'offscreen')}, "
          f"{os.cpu_count()} cores)")
    totals = []
    for i in range(args.runs):
        boot, app = one_run(cmd, str(models_dir()))
        totals.append(boot + app)
        print(f"  run {i + 1}: launch->entry {boot:.2f} s, entry->window {app:.2f} s, total {boot + app:.2f} s")
    print(f"best {min(totals):.2f} s, median {statistics.median(totals):.2f} s over {len(totals)} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
