"""Bounded GGUF loading and dequantization.

    with open_gguf(path) as gguf:
        gguf.metadata["general.architecture"]      # scalars, list[str], or read-only numpy arrays
        gguf.tensors["token_embd.weight"].shape     # numpy order (reversed ggml ne)
        gguf.dequantize("token_embd.weight")       # float32
        Meta(gguf.metadata).get_int("llama.context_length", REQUIRED, lo=16)   # typed, range-checked reads
"""
from engine.gguf.dequant import dequantize
from engine.gguf.file import GGUFFile, GGUFHeader, open_gguf, parse_header
from engine.gguf.meta import REQUIRED, Meta
from engine.gguf.tensors import TensorInfo
from engine.gguf.types import BLOCK_LAYOUT, GGMLType, GGUFValueType

__all__ = ["open_gguf", "parse_header", "GGUFHeader", "GGUFFile", "TensorInfo", "GGMLType", "GGUFValueType", "dequantize", "BLOCK_LAYOUT", "Meta", "REQUIRED"]
