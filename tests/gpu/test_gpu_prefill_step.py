"""The Engine on a GPU prefills a long prompt in the GPU's own step (engine.core.setup.DEFAULT_PREFILL_CHUNK["gpu"],
2,048 tokens: llama.cpp's default batch), not the CPU's 256: the prompt-progress events say where each step
ended, and the greedy reply equals the one from 512-token steps. Needs the SmolLM2 shape-alike (8,192 positions;
the tiny test models hold 256) in HALO_SHAPE_ALIKE_DIR, as tests/gpu/device_call.sh builds it."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("engine.gpu.model")

from engine.api import Finished, GenerateRequest, PromptProgress, SamplingParams  # noqa: E402
from engine.core.setup import DEFAULT_PREFILL_CHUNK  # noqa: E402
from engine.engine import Engine  # noqa: E402

pytestmark = pytest.mark.gpu
TIMEOUT = 180
PROMPT_TOKENS = 2_300                 # one full GPU step and a partial one


@pytest.fixture(scope="module")
def model_path() -> Path:
    d = os.environ.get("HALO_SHAPE_ALIKE_DIR")
    path = Path(d) / "smollm2-135m-q4_1.gguf" if d else None
    if path is None or not path.exists():
        pytest.skip("HALO_SHAPE_ALIKE_DIR does not hold smollm2-135m-q4_1.gguf")
    return path


def _run(gpu_name: str, path: Path, prefill_chunk: int | None) -> tuple[list[int], Finished]:
    """(where each prompt-progress event said the prefill stood, the Finished event) of one greedy request."""
    eng = Engine(max_context=4096, backend=gpu_name, prefill_chunk=prefill_chunk, max_num_seqs=2)
    try:
        eng.load(path).result(TIMEOUT)
        ids = np.random.default_rng(3).integers(0, 49_152, PROMPT_TOKENS).tolist()
        handle = eng.submit(GenerateRequest(prompt_token_ids=tuple(ids), report_progress=True,
                                            params=SamplingParams.greedy(max_tokens=4)))
        progress = []
        for event in handle.events(TIMEOUT):
            if isinstance(event, PromptProgress):
                assert event.total == PROMPT_TOKENS
                progress.append(event.processed)
        return progress, handle.finished
    finally:
        eng.shutdown()


def test_a_long_prompt_takes_the_gpus_step_and_replies_as_with_smaller_steps(gpu_name, model_path):
    step = DEFAULT_PREFILL_CHUNK["gpu"]
    progress, fin = _run(gpu_name, model_path, None)
    assert fin.error is None and fin.usage.prompt_tokens == PROMPT_TOKENS
    assert progress == list(range(step, PROMPT_TOKENS, step)) == [2048]
    small_progress, small = _run(gpu_name, model_path, 512)
    assert small_progress == [512, 1024, 1536, 2048]
    assert small.output_token_ids == fin.output_token_ids and len(fin.output_token_ids) == 4
