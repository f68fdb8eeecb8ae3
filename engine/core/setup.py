"""Building an EngineCore for a loaded model: which backend, whether steps overlap, and why.

Async scheduling is decided by engine.diagnostics.async_scheduling_decision from the backend's PROBED
capability `async_sampled_token_readback` (a safe readback path exists), the app setting and
HALO_ASYNC_SCHEDULING=0; the reason string is what the diagnostics view and status bar show.
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


def choose_backend(setting: str = "cpu", async_setting: bool = True, env: dict | None = None) -> BackendChoice:
    """`setting`: "auto", "cpu", "cuda", "hip" (diagnostics.BACKEND_SETTINGS) or a registry name."""
    from engine.backends.probe import probe, probe_all
    from engine.backends.registry import BACKENDS
    from engine.diagnostics import async_scheduling_decision, select_backend

    if setting in BACKENDS:
        selected = probe(setting, host_read_checks=False)
        why = f"asked for {setting}" if selected.available else f"{setting} is not available: {selected.reason}"
        selected = selected if selected.available else None
    else:
        selected, why = select_backend(probe_all(host_read_checks=False), setting)
    if selected is None:                              # fall back to the CPU, saying why
        selected, why = probe("cpu"), f"CPU fallback: {why}"
    on, async_why = async_scheduling_decision(selected, async_setting, env)
    return BackendChoice(selected.backend, why, on, async_why)


def make_scheduler(num_kv_blocks: int, block_size: int, max_model_len: int, async_scheduling: bool,
                   max_num_seqs: int = DEFAULT_MAX_NUM_SEQS, max_num_batched_tokens: int = 256) -> Scheduler:
    config = SchedulerConfig(max_num_seqs=max_num_seqs,
                             max_num_batched_tokens=max(max_num_batched_tokens, max_num_seqs),
                             max_model_len=max_model_len, async_scheduling=async_scheduling)
    return Scheduler(config, KVBlockManager(num_kv_blocks, block_size))
