"""engine/core imports nothing above it: the scheduler/runner layer loads without the diagnostics report
or the GPU package, and the GPU executor (engine.gpu.executor) imports core without a cycle."""
from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
                         capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_core_imports_neither_diagnostics_nor_gpu():
    loaded = _modules_after("import engine.core.setup, engine.core.build, engine.core.built")
    assert not {m for m in loaded if m.startswith(("engine.diagnostics", "engine.gpu", "engine.backend_choice"))}


def test_gpu_executor_imports_first_without_a_cycle():
    loaded = _modules_after("import engine.gpu.executor as e; assert e.build_gpu_model and e.GpuStepExecutor")
    assert "engine.core.built" in loaded and "engine.core.build" not in loaded
