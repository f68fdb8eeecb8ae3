"""The mixture-of-experts models (qwen3moe, gpt-oss) through the real scheduler, runner and CPU forward on the
tiny random-weight files of tests/golden/data: the 24-token prompt chunked over three steps then 32 greedy
ids equal transformers' golden, with async scheduling off and on; requests of different lengths batched (each
step's tokens routed to different experts) equal each run alone; nothing is left allocated."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.model.loader import load_model
from engine.prompt import PromptFormat
from tests.unit.test_engine_core import Harness, each_alone

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"


@pytest.fixture(scope="module", params=["tiny-qwen3moe-q8_0", "tiny-gptoss-mxfp4"])
def tiny(request):
    lm = load_model(DATA / f"{request.param}.gguf")
    return lm, PromptFormat.from_metadata(lm.metadata).tokenizer, dict(np.load(DATA / f"{request.param}.golden.npz"))


@pytest.mark.parametrize("async_on", [False, True])
def test_chunked_prompt_then_32_greedy_ids_equal_transformers(tiny, async_on):
    h = Harness(tiny, async_on, budget=8)
    h.submit("a", tiny[2]["prompt_ids"], max_tokens=32)
    h.run()
    assert h.ids("a") == [int(t) for t in tiny[2]["greedy_ids"]]
    assert sum(1 for p in h.plans if p.seqs[0].start_position < 24) == 3          # 8 + 8 + 8
    assert h.core.scheduler.kv.num_used == 0


def test_batched_requests_equal_each_run_alone(tiny):
    base = [int(t) for t in tiny[2]["prompt_ids"]]
    ps = [base[i:i + 4 + 3 * i] for i in range(5)]
    alone = each_alone(tiny, ps, 6)
    h = Harness(tiny, async_on=True, max_num_seqs=5, budget=12)
    for i, p in enumerate(ps):
        h.submit(f"r{i}", p, max_tokens=6)
    h.run()
    assert {r: h.ids(r) for r in alone} == alone
    assert max(len(p.seqs) for p in h.plans) >= 4
    assert h.core.scheduler.kv.num_used == 0
