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


def engine_bench(*args: str) -> dict:
    """`python -m engine bench --json` on the tiny model, 16 prompt tokens, 8 generated each: its JSON."""
    proc = subprocess.run([sys.executable, "-m", "engine", "bench", "--model", str(TINY), *args,
                           "--prompt-tokens", "16", "--decode-tokens", "8", "--json"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_engine_bench_reports_model_open_within_the_load():
    out = engine_bench("--async", "on")
    assert 0 < out["open_s"] <= out["load_s"]
    assert out["generated_tokens"] == 8 and out["prompt_tokens"] == 16 and out["aggregate_tok_s"] > 0


def test_the_engine_bench_reports_steady_decode_of_concurrent_requests():
    out = engine_bench("--concurrency", "3")
    assert out["generated_tokens"] == 24 and out["concurrency"] == 3
    assert out["steady_decode_tok_s"] > 0


def test_steady_decode_counts_only_tokens_after_every_first_token():
    from engine.bench import steady_decode_rate
    # request a: first token at 1.0, then 1 token each at 2, 3; b: first at 2.5 (its prefill ran later), then 4
    deltas = [(1.0, "a", 1), (2.0, "a", 1), (2.5, "b", 1), (3.0, "a", 1), (4.0, "b", 1), (4.5, "b", 0)]
    assert steady_decode_rate(deltas, end=4.5) == 2 / (4.5 - 2.5)       # a's token at 3.0 and b's at 4.0
    assert steady_decode_rate([(1.0, "a", 1)], end=1.0) == 0.0
