"""Does a (remote) model fit this machine? Answered from the header alone with the engine's own numbers:
`ModelConfig.from_metadata` (can the engine run the architecture at all), `gpu_unsupported_reason` (can the
GPU path run it), the load pre-flights' plans (`engine.gpu.preflight.plan_memory`,
`engine.model.host_memory.plan_host_memory`, with the Engine's defaults and the user's KV cache type: the
numbers a load refuses with, so a file said to fit here does not fail its load on scratch and reserve; under
them the model library's figure, `engine.model.arch.memory_estimate`) and the words of
`engine.model.memory_fit.fit_verdict` (where it fits, and on an integrated GPU how its dedicated and shared
memory limit that, and what to change). Nothing is recomputed here.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from typing import Literal

from engine.errors import EngineError
from engine.gguf import GGUFHeader
from engine.gpu.preflight import plan_memory
from engine.gpu.weights import gpu_unsupported_reason  # imports no driver
from engine.model.arch import BLOCK_SIZE, DEFAULT_KV_CACHE_TYPE, context_blocks
from engine.model.config import ModelConfig
from engine.model.host_memory import plan_host_memory
from engine.model.memory_fit import MemoryFacts, amd_dedicated_bytes
from engine.model.memory_fit import fit_verdict as memory_verdict

Fit = Literal["gpu", "cpu", "too_large", "unsupported"]
VERDICT_CONTEXT = 4096          # the context a verdict assumes (the app's default chat length)


@dataclass(frozen=True)
class Machine:
    """Memory the model could use: the best GPU's free memory (None: no usable GPU) and the host's RAM."""

    ram_free: int
    gpu_free: int | None = None
    gpu_name: str = ""
    gpu_total: int = 0                  # what the GPU runtime reports in all (0: not known; taken as gpu_free)
    integrated: bool = False            # an integrated GPU, its memory carved from and borrowed from the RAM
    dedicated: int | None = None        # integrated: the firmware's carve-out (None: not known)
    ram_total: int = 0                  # 0: not known (taken as ram_free)
    platform: str = sys.platform

    def facts(self) -> MemoryFacts:
        gpu = self.gpu_free is not None
        return MemoryFacts(host_total=self.ram_total or self.ram_free, host_available=self.ram_free,
                           gpu_name=(self.gpu_name or "the GPU") if gpu else "",
                           gpu_total=(self.gpu_total or self.gpu_free or 0) if gpu else 0,
                           gpu_free=self.gpu_free or 0, integrated=self.integrated and gpu, dedicated=self.dedicated,
                           platform=self.platform)


@dataclass(frozen=True)
class Verdict:
    fit: Fit
    words: str                     # one line for the user, with the numbers
    architecture: str = ""
    gpu_bytes: int = 0             # the pre-flight plan's total on each backend (needs); 0 when not computed
    cpu_bytes: int = 0


def current_machine() -> Machine:
    """Asks the backend probe (never raises; ~1 s: call once, off the GUI thread)."""
    from engine.backends.probe import probe_all

    ram, ram_total, best = 0, 0, None
    for r in probe_all(host_read_checks=False):
        if not r.available or r.facts is None:
            continue
        free = r.facts.free_memory or 0
        if r.facts.api == "cpu":
            ram, ram_total = max(ram, free), max(ram_total, r.facts.total_memory or 0)
        elif best is None or free > (best.free_memory or 0):
            best = r.facts
    if best is None:
        return Machine(ram_free=ram, ram_total=ram_total)
    integrated = bool(best.integrated)
    return Machine(ram_free=ram, gpu_free=best.free_memory or 0, gpu_name=best.name, ram_total=ram_total,
                   gpu_total=best.total_memory or 0, integrated=integrated, platform=best.platform,
                   dedicated=amd_dedicated_bytes() if integrated and best.platform == "linux" else None)


def planned_needs(config: ModelConfig, tensors, context: int,
                  kv_type: str = DEFAULT_KV_CACHE_TYPE) -> tuple[int, int]:
    """(GPU, CPU) bytes the load pre-flights plan for a `context`-token cache of `kv_type` (the CPU keeps f32)
    with the Engine's defaults (the batch of sequences; the CPU's prefill chunk, and the GPU's shortest, which a load
    takes where only it fits)."""
    from engine.core.setup import (
        DEFAULT_MAX_NUM_SEQS,
        GPU_PREFILL_CHUNK_FLOOR,
        device_prefill_chunk,
        step_tokens,
    )

    blocks = context_blocks(config, context)
    gpu = plan_memory(config, tensors, blocks, BLOCK_SIZE, step_tokens(GPU_PREFILL_CHUNK_FLOOR, DEFAULT_MAX_NUM_SEQS),
                      DEFAULT_MAX_NUM_SEQS, kv_type).total
    cpu = plan_host_memory(config, tensors, blocks, BLOCK_SIZE, device_prefill_chunk("cpu"), DEFAULT_MAX_NUM_SEQS).total
    return gpu, cpu


def fit_verdict(header: GGUFHeader, machine: Machine, context: int = VERDICT_CONTEXT,
                kv_type: str = DEFAULT_KV_CACHE_TYPE) -> Verdict:
    """Where the file would run with a `context`-token chat and the GPU's KV cache in `kv_type`
    (engine.model.arch.KV_CACHE_TYPES: the user's setting)."""
    arch = header.metadata.get("general.architecture")
    arch = arch if isinstance(arch, str) else ""
    try:
        config = ModelConfig.from_metadata(header.metadata)
    except EngineError as e:
        return Verdict("unsupported", f"cannot run here: {e}", arch)
    tensors = list(header.tensors.values())
    gpu, cpu = planned_needs(config, tensors, context, kv_type)
    gpu_refusal = gpu_unsupported_reason(config, tensors)
    facts = machine.facts()
    if gpu_refusal is not None:
        facts = replace(facts, gpu_name="")          # the GPU cannot run it: only the CPU is weighed
    v = memory_verdict(facts, gpu, cpu)
    fit: Fit = "too_large" if v.where is None else v.where
    kv_words = "" if kv_type == DEFAULT_KV_CACHE_TYPE else f", the GPU's KV cache in {kv_type}"
    words = v.words + f" (At a {context:,}-token context{kv_words}.)"
    if gpu_refusal is not None and machine.gpu_free is not None:
        words = f"Not on the GPU: {gpu_refusal}. " + words
    return Verdict(fit, words, arch, gpu, cpu)

