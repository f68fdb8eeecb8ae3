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


@dataclass(frozen=True)
class BackendChoice:
    name: str                  # registry name: "cpu", "cuda-python", ...
    reason: str                # why this backend
    async_scheduling: bool
    async_reason: str


def make_scheduler(num_kv_blocks: int, block_size: int, max_model_len: int, async_scheduling: bool,
                   max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, max_num_batched_tokens: int = 256) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max(max_num_batched_tokens, max_num_seqs),
                             max_model_len=max_model_len, async_scheduling=async_scheduling)
    return Scheduler(config, KVBlockManager(num_kv_blocks, block_size))
