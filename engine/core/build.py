"""Load a model onto a backend and wrap it in an EngineCore (engine thread; called by Engine.load).

CPU: the dequantized CpuModel + a float32 KVCache + CpuStepExecutor on the CPU backend (whatever KV cache
     type is asked: arch.kv_cache_type gives "f32" on the CPU).
GPU: engine.gpu.executor: GpuModel (quantized weights on the device) + its KV cache of the asked type
     (engine.model.arch.KV_CACHE_TYPES) + GpuStepExecutor.
Either way the built ModelInfo.kv_cache_type says which type the cache holds.
Both end in the same ModelRunner / ReadbackPool / EngineCore: one code path from the scheduler down.
"""
from __future__ import annotations

import importlib.util
from dataclasses import replace
from pathlib import Path

from engine.core.built import BuiltModel, kv_blocks
from engine.core.engine_core import EngineCore
from engine.core.runner import ModelRunner
from engine.core.setup import BackendChoice, device_prefill_chunk, make_scheduler
from engine.model.arch import BLOCK_SIZE
from engine.model.arch import kv_cache_type as resolve_kv_cache_type
from engine.model.config import ModelConfig
from engine.prompt import PromptFormat


def build_cpu(path: Path, choice: BackendChoice, on_progress, *, max_context: int, max_num_seqs: int,
              prefill_chunk: int | None, kv_cache_tokens: int | None, kv_cache_type: str) -> BuiltModel:
    """`prefill_chunk` None: the CPU's default (engine.core.setup.DEFAULT_PREFILL_CHUNK)."""
    from engine.backends.registry import create
    from engine.core.cpu_executor import CpuStepExecutor
    from engine.model.host_memory import check_host_fits, plan_host_memory
    from engine.model.loader import load_model, open_model_file
    from engine.model.step import KVCache

    prefill_chunk = device_prefill_chunk("cpu", prefill_chunk)
    with open_model_file(path) as gguf:      # pre-flight from the header, before anything is dequantized
        config = ModelConfig.from_metadata(gguf.metadata)
        max_context = min(config.context_length, max_context)
        num_blocks = kv_blocks(max_context, kv_cache_tokens)
        check_host_fits(plan_host_memory(config, gguf.tensors.values(), num_blocks, BLOCK_SIZE, prefill_chunk,
                                         max_num_seqs), what=Path(path).name)
        # before the weights: a tokenizer or chat template we refuse is refused in a moment, not after the load
        prompt_format = PromptFormat.from_metadata(gguf.metadata)
        loaded = load_model(path, on_progress, gguf)
    kv = KVCache.allocate(loaded.config, num_blocks=num_blocks, block_size=BLOCK_SIZE, state_slots=max_num_seqs)
    backend = create("cpu")
    executor = CpuStepExecutor(backend, loaded.model, kv, max_num_seqs)
    scheduler = make_scheduler(num_blocks, BLOCK_SIZE, max_context, choice.async_scheduling, max_num_seqs,
                               prefill_chunk, "cpu")
    core = EngineCore(scheduler, ModelRunner(executor, BLOCK_SIZE, max_num_seqs))
    info = replace(loaded.info, backend="cpu", kv_cache_type=resolve_kv_cache_type(kv_cache_type, "cpu"),
                   prefill_chunk=prefill_chunk)
    return BuiltModel(info, prompt_format, loaded.config.vocab_size, core, max_context)


def gpu_forward_available() -> bool:
    """True once engine.gpu (the GPU forward pass) and our adapter to it are present."""
    return (importlib.util.find_spec("engine.gpu.model") is not None
            and importlib.util.find_spec("engine.gpu.executor") is not None)


def build_gpu(path: Path, choice: BackendChoice, on_progress, *, max_context: int, max_num_seqs: int,
              prefill_chunk: int | None, kv_cache_tokens: int | None, kv_cache_type: str) -> BuiltModel:
    from engine.gpu.executor import build_gpu_model
    return build_gpu_model(path, choice, on_progress, max_context=max_context, max_num_seqs=max_num_seqs,
                           prefill_chunk=prefill_chunk, kv_cache_tokens=kv_cache_tokens, kv_cache_type=kv_cache_type)
