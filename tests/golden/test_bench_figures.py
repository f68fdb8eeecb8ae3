"""`python -m engine bench --async on --json` on a tiny model: the Engine bench reports the figures the issues
ask for, consistent with each other (the figures themselves are measured on real hardware, never asserted):
model open (to the first weights streamed) within the whole load, and the tokens it generated."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "golden" / "data" / "tiny-qwen3moe-q8_0.gguf"


def test_the_engine_bench_reports_model_open_within_the_load():
    proc = subprocess.run([sys.executable, "-m", "engine", "bench", "--model", str(TINY), "--async", "on",
                           "--prompt-tokens", "16", "--decode-tokens", "8", "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert 0 < out["open_s"] <= out["load_s"]
    assert out["generated_tokens"] == 8 and out["prompt_tokens"] == 16 and out["aggregate_tok_s"] > 0
