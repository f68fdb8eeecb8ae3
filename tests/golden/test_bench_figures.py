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


def test_steady_decode_counts_only_the_steps_where_every_request_decodes():
    from engine.bench import steady_decode_rate
    # two requests decoding one token a step each second, b's prefill a step and a half later: a's first token at
    # 1.0, then 2, 3, 4, 5 (its Finished at 5.0); b's first at 2.5, then 3.5 .. 6.5 while the batch holds b alone
    deltas = [(1.0, "a", 1), (2.0, "a", 1), (2.5, "b", 1), (3.0, "a", 1), (3.5, "b", 1), (4.0, "a", 1),
              (4.5, "b", 1), (5.0, "a", 1), (5.5, "b", 1), (6.5, "b", 1)]
    # inside (2.5, 5.0]: a's tokens at 3, 4, 5 (1 a second), b's at 3.5, 4.5 (1 a second): 2 tok/s for the batch,
    # where counting to the last Finished (7 tokens in 4 s) would blend in the steps b decodes alone
    assert steady_decode_rate(deltas, first_finish=5.0) == 2.0
    # a delta holding two tokens counts both
    assert steady_decode_rate([(1.0, "a", 1), (2.0, "a", 2), (3.0, "a", 2)], first_finish=3.0) == 2.0


def test_steady_decode_is_zero_when_no_step_has_every_request_decoding():
    from engine.bench import steady_decode_rate
    # a finishes before b decodes twice after its first token
    deltas = [(1.0, "a", 1), (2.0, "a", 1), (2.5, "b", 1), (3.0, "a", 1), (3.5, "b", 1)]
    assert steady_decode_rate(deltas, first_finish=3.0) == 0.0
    assert steady_decode_rate([(1.0, "a", 1)], first_finish=1.0) == 0.0
    assert steady_decode_rate([], first_finish=1.0) == 0.0
