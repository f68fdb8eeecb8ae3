"""The on-device sampler's repetition penalty and first-step top logits, through the whole Engine on a real
GPU, against the same Engine on the CPU backend (whose host sampler is engine.sampling): several requests
at once with different penalties (per-row history and bitmaps), async scheduling on and off (the newest id
reaches the penalty through the device-side history, never through the host)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("engine.gpu.model")

from engine.api import GenerateRequest, SamplingParams  # noqa: E402
from engine.engine import Engine  # noqa: E402

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]
MODELS = [ROOT / "tests" / "golden" / "data" / n for n in ("tiny-llama-q4_1.gguf", "tiny-gemma3-q4_k_m.gguf")]
TIMEOUT = 180
PROMPTS = ["The quick brown fox", "Once upon a time there was a small", "Numbers: one two three four"]
PENALTIES = [1.0, 1.3, 2.5]


def generate(backend: str, model: Path, async_on: bool, params: list[SamplingParams]):
    eng = Engine(max_context=256, backend=backend, async_scheduling=async_on, max_num_seqs=4)
    try:
        eng.load(model).result(TIMEOUT)
        handles = [eng.submit(GenerateRequest(prompt=PROMPTS[i], params=p, request_id=f"r{i}"))
                   for i, p in enumerate(params)]
        return [h.text(TIMEOUT)[1] for h in handles]
    finally:
        eng.shutdown()


@pytest.mark.parametrize("model", MODELS, ids=lambda p: p.stem)
@pytest.mark.parametrize("async_on", [False, True], ids=["sync", "async"])
def test_repetition_penalty_and_top_logits_match_the_cpu(gpu_name, model, async_on):
    params = [SamplingParams.greedy(max_tokens=24, repetition_penalty=pen, top_logits=6) for pen in PENALTIES]
    cpu = generate("cpu", model, False, params)
    gpu = generate(gpu_name, model, async_on, params)
    for pen, c, g in zip(PENALTIES, cpu, gpu, strict=True):
        print(f"\n{model.stem} penalty {pen}: cpu {list(c.output_token_ids)}\n{' ' * len(model.stem)} gpu "
              f"{list(g.output_token_ids)}")
        assert g.output_token_ids == c.output_token_ids
        assert [i for i, _ in g.first_top_logits] == [i for i, _ in c.first_top_logits]
        np.testing.assert_allclose([v for _, v in g.first_top_logits], [v for _, v in c.first_top_logits],
                                   atol=1e-3, rtol=0)
    # the penalty is not a no-op on these prompts: it changes what greedy decoding says (1.0 changes nothing)
    plain = generate("cpu", model, False, [SamplingParams.greedy(max_tokens=24)] * 3)
    assert plain[0].output_token_ids == cpu[0].output_token_ids
    assert any(p.output_token_ids != c.output_token_ids for p, c in zip(plain[1:], cpu[1:], strict=True))
