"""The model library: which GGUF files the user has, what each one is, and what loading it would cost.

Pure Python (no Qt): `inspect_model` reads only the header through the engine's bounded parser, so a
hostile file gives an entry with `error` set instead of an exception in the GUI.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine.errors import EngineError, short_repr
from engine.gguf import Meta, open_gguf
from engine.model.arch import kv_bytes_per_token, memory_estimate
from engine.model.config import ModelConfig
from engine.model.loader import display_name as model_display_name
from engine.paths import models_dir

# general.file_type (llama.cpp's LLAMA_FTYPE) -> the name users know; others fall back to the dominant type.
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
               17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoadTarget:
    """What a load would be made with, as the settings and the engine stand now (app.window_models'
    ModelActions.load_target asks them): the load itself, the library's estimates and the Discover page's
    verdicts all take this one answer."""

    backend: str            # where the model would run: "cpu" or "gpu" (the CPU counts float32 weights)
    context: int            # the context setting (the engine caps it at the model's trained length)
    kv_cache_type: str      # the KV cache precision setting (engine.model.arch.KV_CACHE_TYPES; the CPU keeps f32)


@dataclass(frozen=True)
class ModelEntry:
    path: Path
    file_size: int
    name: str = ""
    architecture: str = ""
    quantization: str = ""
    context_length: int = 0
    n_layers: int = 0
    n_kv_heads: int = 0
    head_dim: int = 0
    has_chat_template: bool = False
    weight_bytes: int = 0        # the engine's formula (engine.model.arch.memory_estimate, GPU residency)
    kv_bytes_per_token: int = 0  # 0 when the engine cannot run the architecture
    state_bytes: int = 0         # one sequence's recurrent state (hybrid models)
    error: str = ""          # set when the file could not be read: the parser's message for the user
    # What the scan read for estimates (ModelConfig, TensorInfos), so that showing one reads no file on the GUI
    # thread; None where the engine cannot run the architecture.
    header: tuple | None = field(default=None, compare=False, repr=False)

    @property
    def ok(self) -> bool:
        return not self.error

    @property
    def display_name(self) -> str:
        return self.name or self.path.stem

    def kv_cache_bytes(self, context: int) -> int:
        """The KV cache over `context` positions plus one sequence's recurrent state, by the engine's formula."""
        return self.kv_bytes_per_token * context + self.state_bytes

    def estimate(self, context: int, backend: str = "gpu", kv_cache_type: str | None = None):
        """engine.api.estimate_memory for this file on `backend` ("cpu": quantized matrices at their file
        size where the CPU kernels exist) with the KV cache type setting (None: the engine's default; the CPU
        keeps f32), or None when the engine cannot tell (unreadable file, an architecture it does not run).
        From the header the scan read: the file is not opened again."""
        from engine.api import estimate_from_header

        if not self.ok or self.header is None:
            return None
        config, tensors = self.header
        return estimate_from_header(config, tensors, context, backend, kv_cache_type=kv_cache_type)

    def memory_estimate(self, context: int, backend: str = "gpu", kv_cache_type: str | None = None) -> int:
        """Weights + KV cache (+ recurrent state) at min(context, trained length), as the engine allocates
        them on `backend` with `kv_cache_type`; scratch is small beside them."""
        est = self.estimate(context, backend, kv_cache_type)
        if est is not None:
            return est.total
        ctx = min(context, self.context_length) if self.context_length else context
        return (self.weight_bytes or self.file_size) + self.kv_cache_bytes(ctx)


def inspect_model(path: Path | str) -> ModelEntry:
    """Never raises for a bad file: the entry carries the error text instead."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError as e:
        return ModelEntry(path=path, file_size=0, error=f"cannot read the file: {e.strerror or e}")
    try:
        with open_gguf(path) as gguf:
            return _entry_from_metadata(path, size, gguf.metadata, gguf.tensors)
    except EngineError as e:
        from app.error_messages import file_problem

        return ModelEntry(path=path, file_size=size, error=file_problem(e))
    except OSError as e:
        return ModelEntry(path=path, file_size=size, error=f"cannot read the file: {e.strerror or e}")
    except Exception as e:   # a reader bug must list one bad file, never stop the scan or the app's start
        log.exception("unexpected error inspecting %s", path)
        return ModelEntry(path=path, file_size=size,
                          error=f"the file could not be read ({type(e).__name__}: {short_repr(str(e))})")


def _entry_from_metadata(path: Path, size: int, metadata, tensors) -> ModelEntry:
    """Typed reads only (engine.gguf.Meta): a wrong-typed key is an InvalidModelError, caught above."""
    meta = Meta(metadata)
    arch = meta.get_str("general.architecture", "")

    def arch_int(key: str) -> int:
        value = meta.get_int_or_per_layer(f"{arch}.{key}", 0, lo=0)
        return int(value.max()) if isinstance(value, np.ndarray) and len(value) else int(value or 0)

    n_head = arch_int("attention.head_count")
    n_kv = arch_int("attention.head_count_kv") or n_head
    head_dim = arch_int("attention.key_length") or (arch_int("embedding_length") // n_head if n_head else 0)
    weights, per_token, state, header = size, 0, 0, None
    try:
        config = ModelConfig.from_metadata(meta)
    except EngineError:
        config = None          # not runnable here: the entry still lists it, without a memory figure
    if config is not None:
        est = memory_estimate(config, 0, "gpu", tensors.values())
        weights, per_token, state = est.weights, kv_bytes_per_token(config, "gpu"), est.recurrent_state
        header = (config, tuple(tensors.values()))
    return ModelEntry(
        path=path, file_size=size, name=model_display_name(meta, path), architecture=arch,
        quantization=_quantization(meta, tensors), context_length=arch_int("context_length"),
        n_layers=arch_int("block_count"), n_kv_heads=n_kv, head_dim=head_dim,
        has_chat_template=bool(meta.get_str("tokenizer.chat_template")), weight_bytes=weights,
        kv_bytes_per_token=per_token, state_bytes=state, header=header)


def _quantization(meta, tensors) -> str:
    file_type = meta.get_int("general.file_type")
    if file_type in _FILE_TYPES:
        return _FILE_TYPES[file_type]
    by_type: dict[str, int] = {}
    for info in tensors.values():
        by_type[info.ggml_type.name] = by_type.get(info.ggml_type.name, 0) + info.nbytes
    return max(by_type, key=by_type.get) if by_type else "?"


def library_folders(extra: Iterable[str | Path]) -> list[Path]:
    """The app's models folder first, then the user's folders, without duplicates."""
    seen: dict[str, Path] = {}
    for folder in (models_dir(), *map(Path, extra)):
        seen.setdefault(os.path.normcase(str(folder.resolve() if folder.exists() else folder)), folder)
    return list(seen.values())


def find_gguf_files(folders: Iterable[Path]) -> list[Path]:
    """*.gguf directly inside each folder (not recursive: a models folder is flat), sorted by name."""
    found: dict[str, Path] = {}
    for folder in folders:
        try:
            for entry in os.scandir(folder):
                if entry.is_file() and entry.name.lower().endswith(".gguf"):
                    found.setdefault(os.path.normcase(entry.path), Path(entry.path))
        except OSError:
            continue   # a removed USB drive or a deleted folder is not an error worth a dialog
    return sorted(found.values(), key=lambda p: p.name.lower())


def human_size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit in ("B", "KB") else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} TB"
