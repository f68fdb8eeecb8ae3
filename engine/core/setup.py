"""Building an EngineCore for a loaded model: which backend, whether steps overlap, and why.

A BackendChoice is made by engine.backend_choice.choose_backend (from the probe and the diagnostics'
decisions, which live above core/); here it is only data.
"""
from __future__ import annotations

from dataclasses import dataclass

from engine.core.kv_blocks import KVBlockManager
from engine.core.sched_types import SchedulerConfig
from engine.core.scheduler import Scheduler

DEFAULT_MAX_NUM_SEQS = 8

# Prompt tokens one step takes, by device ("cpu" / "gpu"), unless the Engine is given its own. The GPU's is
# llama.cpp's default logical batch (n_batch 2048, which its server also runs as one decode call, other requests'
# tokens waiting behind it as they do here): on an H100 the Qwen3-4B shapes' 4,096-token prompt prefilled at
# 10,341 / 10,992 / 11,525 tok/s in steps of 512 / 1,024 / 2,048 (f16 cache; float32 9,082 / 9,564 / 10,055), the
# products' tiles fuller and split K no longer needed (docs/results/run-26.md). The CPU's bounds its attention
# scores' scratch (plan_host_memory) and how long a stop waits for the step under way.
DEFAULT_PREFILL_CHUNK = {"cpu": 256, "gpu": 2048}
# Prompt tokens a step takes while other requests decode, by device (None: the whole chunk). On the CPU (a 2-core
# Zen 3, 2026-12-07) a prompt of N ids arriving beside three streaming replies made each reply wait up to a whole
# 256-token step for its next token: SmolLM2, N = 3,000: 2.2 s; gemma-3-270m, N = 2,000: 1.4 s. In 64-token steps
# beside them: 0.86 s / 0.65 s, the replies writing 3.5x as many tokens meanwhile, the prompt's first token 36% /
# 30% later (26.6 against 19.5 s, 12.8 against 9.9 s): a step's fixed cost (every weight decoded for the
# prefill's sgemm) is paid more often. 128 halved the gain for the same cost. A GPU's 2,048-token step takes tens
# of ms (hundreds only deep in a long context), as llama.cpp's server batches it.
PREFILL_BESIDE_DECODES: dict[str, int | None] = {"cpu": 64, "gpu": None}
# A GPU whose free memory holds the model only with shorter steps gets them (the GPU's default halved down to this,
# engine.gpu.preflight.fitting_prefill_chunk: the step before run 26) rather than a refusal
GPU_PREFILL_CHUNK_FLOOR = 256


def device_prefill_chunk(device: str, asked: int | None = None) -> int:
    """Prompt tokens per step on `device` ("cpu" / "gpu"): `asked` where given, else the device's default."""
    return asked or DEFAULT_PREFILL_CHUNK[device]


def step_tokens(prefill_chunk: int, max_num_seqs: int) -> int:
    """The token budget of one step: a prefill chunk, or one token of every running sequence if that is more.
    The scheduler plans within it and the model's scratch is sized for it."""
    return max(prefill_chunk, max_num_seqs)


@dataclass(frozen=True)
class BackendChoice:
    name: str                  # registry name: "cpu", "cuda-python", ...
    reason: str                # why this backend
    async_scheduling: bool
    async_reason: str


def make_scheduler(num_kv_blocks: int, block_size: int, max_model_len: int, async_scheduling: bool,
                   max_num_seqs: int, prefill_chunk: int, device: str) -> Scheduler:
    """`device` ("cpu" / "gpu") picks how much prompt a step takes beside decodes (PREFILL_BESIDE_DECODES)."""
    config = SchedulerConfig(max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=step_tokens(prefill_chunk, max_num_seqs),
                             max_model_len=max_model_len, async_scheduling=async_scheduling,
                             prefill_beside_decodes=PREFILL_BESIDE_DECODES[device])
    return Scheduler(config, KVBlockManager(num_kv_blocks, block_size))
