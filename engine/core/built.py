"""What building a model for the engine yields (engine.core.build, engine.gpu.executor) and the KV sizing
they share."""
from __future__ import annotations

from dataclasses import dataclass

from engine.api import ModelInfo
from engine.core.engine_core import EngineCore
from engine.model.arch import BLOCK_SIZE
from engine.prompt import PromptFormat


@dataclass
class BuiltModel:
    info: ModelInfo
    prompt_format: PromptFormat
    vocab_size: int
    core: EngineCore
    max_context: int


def kv_blocks(max_context: int, kv_cache_tokens: int | None) -> int:
    """The KV cache holds at least one full-length sequence; concurrent requests share it (the scheduler
    preempts when it runs out)."""
    tokens = max(max_context, kv_cache_tokens or 0)
    return -(-tokens // BLOCK_SIZE)
