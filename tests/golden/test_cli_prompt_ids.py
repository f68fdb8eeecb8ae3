"""`python -m engine generate --prompt-ids ... --json --top-logits K` on the tiny model of every architecture:
the ids go in as they are, and the greedy continuation and first top logits equal transformers' golden."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "golden" / "data"
F32 = sorted(p.stem for p in DATA.glob("tiny-*-f32.gguf"))


@pytest.mark.parametrize("name", F32)
def test_prompt_ids_reproduce_the_golden_continuation(name):
    g = np.load(DATA / f"{name}.golden.npz")
    n = 5
    proc = subprocess.run([sys.executable, "-m", "engine", "generate", "--model", str(DATA / f"{name}.gguf"),
                           "--prompt-ids", ",".join(str(int(t)) for t in g["prompt_ids"]), "--json",
                           "--top-logits", "3", "--max-tokens", str(n), "--temperature", "0"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["prompt_token_ids"] == g["prompt_ids"].tolist()
    assert out["generated_token_ids"] == g["greedy_ids"][:n].tolist()
    top = np.argsort(g["greedy_logits"][0])[::-1][:3]
    assert [i for i, _ in out["first_top_logits"]] == top.tolist()
    np.testing.assert_allclose([v for _, v in out["first_top_logits"]], g["greedy_logits"][0][top], atol=2e-4)


def test_prompt_and_prompt_ids_are_exclusive():
    proc = subprocess.run([sys.executable, "-m", "engine", "generate", "--model", str(DATA / f"{F32[0]}.gguf"),
                           "--prompt", "hi", "--prompt-ids", "1,2"], capture_output=True, text=True, cwd=ROOT,
                          timeout=60)
    assert proc.returncode == 2 and "exactly one of --prompt or --prompt-ids" in proc.stderr
