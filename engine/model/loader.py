"""Open a GGUF file, build its ModelConfig and Weights, and describe it as a ModelInfo."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.api import ModelInfo
from engine.gguf.meta import Meta
from engine.model.config import ModelConfig
from engine.model.cpu_forward import CpuModel
from engine.model.weights import LoadCallback, Weights, load_weights
from engine.reasoning import template_options

# general.file_type (llama_ftype) -> the name users know
_FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
               11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
               17: "Q5_K_M", 18: "Q6_K", 32: "BF16"}


@dataclass(frozen=True)
class LoadedModel:
    path: Path
    metadata: dict[str, Any]
    config: ModelConfig
    weights: Weights
    model: CpuModel
    info: ModelInfo


def open_model_file(path: Path):
    from engine.gguf import open_gguf  # the bounded parser

    return open_gguf(Path(path))


def type_histogram(gguf) -> Counter:
    return Counter(_type_name(t.ggml_type) for t in gguf.tensors.values())


def _type_name(ggml_type) -> str:
    return getattr(ggml_type, "name", str(ggml_type))


_QUANT_SUFFIX = re.compile(r"[.\-_](I?Q\d[\w]*|F16|F32|BF16|MXFP4[\w]*)$", re.IGNORECASE)


def display_name(meta: Meta, path: Path) -> str:
    """The name people see: general.name, unless the converter made it by title-casing a finetune label
    ("Smollm2 135M 8k Lc100K Mix1 Ep2" from finetune "8k-lc100k-mix1-ep2"); then the file's own name without
    its quantization suffix ("SmolLM2-135M-Instruct"), which keeps the publisher's spelling."""
    name = meta.get_str("general.name", "")
    stem = _QUANT_SUFFIX.sub("", path.stem) or path.stem
    finetune = meta.get_str("general.finetune", "")
    words = [w for w in re.split(r"[-_ ]+", finetune) if w]
    mangled = bool(words) and all(w.lower() in name.lower().split() for w in words)
    return stem if not name or mangled else name


def model_info(path: Path, gguf, config: ModelConfig | None = None) -> ModelInfo:
    meta = Meta(gguf.metadata)
    template = meta.get_str("tokenizer.chat_template")
    hist = type_histogram(gguf)
    quant = _FILE_TYPES.get(meta.get_int("general.file_type"))
    if quant is None:
        non_f32 = {k: v for k, v in hist.items() if k != "F32"} or hist
        quant = max(non_f32, key=non_f32.get) if non_f32 else "unknown"
    params = 0
    for t in gguf.tensors.values():
        n = 1
        for d in t.shape:
            n *= d
        params += n
    arch = meta.get_str("general.architecture", "unknown")
    return ModelInfo(
        path=str(path),
        name=display_name(meta, Path(path)),
        architecture=arch,
        file_size=Path(path).stat().st_size,
        quantization=quant,
        parameters=params,
        context_length=config.context_length if config else meta.get_int(f"{arch}.context_length", 0, lo=0),
        has_chat_template=bool(template),
        template_options=template_options(template),
    )


def load_model(path: Path, progress: LoadCallback | None = None, gguf=None) -> LoadedModel:
    """Parse, validate and dequantize. Raises InvalidModelError / UnsupportedModelError; `progress` may
    raise (e.g. a cancellation) to stop the load between tensors. `gguf`: the file already open (the caller
    read its header for a pre-flight: parsed once, and what was built from that header shares its strings)."""
    path = Path(path)
    if gguf is None:
        with open_model_file(path) as gguf:  # quantized matrices are views that keep the map alive after this
            return load_model(path, progress, gguf)
    config = ModelConfig.from_metadata(gguf.metadata)
    weights = load_weights(gguf, config, progress)
    return LoadedModel(path=path, metadata=dict(gguf.metadata), config=config, weights=weights,
                       model=CpuModel(config, weights), info=model_info(path, gguf, config))
