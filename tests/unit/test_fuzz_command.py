"""The fuzz command (README) runs for a bounded time in CI: zero untyped exceptions from any reader."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_fuzz_command_finds_no_untyped_exception():
    result = subprocess.run([sys.executable, "-m", "engine.gguf.fuzz", "--seconds", "20", "--seed", "12"],
                            capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    summary = result.stdout.strip().splitlines()[-1]
    assert " 0 untyped exceptions" in summary
    assert int(summary.split()[0]) > 500          # it really ran many cases
