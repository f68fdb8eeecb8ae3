"""`python -m engine bench`: load time, prefill and decode speed, time to first token, peak memory.

Measures the CPU forward pass directly (no engine thread), with the same shapes llama-bench uses:
a 128-token prompt, then 64 greedy decode tokens. One run per figure unless --repeat asks for more
(best of N is reported); the cores may be shared, so do not loop this.
"""
from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.model.blas import blas_threads
from engine.model.loader import load_model
from engine.model.step import KVCache, SequenceBlocks
from engine.prompt import PromptFormat

_TEXT = ("The history of computing is a story of people, ideas and machines. Early mechanical calculators "
         "gave way to electronic computers, which filled rooms and consumed enormous amounts of power. ")


# llama.cpp on a 2-core CI-class machine (shared/reference/README.md): (prefill tok/s, decode tok/s)
LLAMA_CPP_2CORE = {"SmolLM2-135M-Instruct.Q4_1.gguf": (194.0, 74.0), "gemma-3-270m-q4_k_m.gguf": (327.0, 46.5)}


@dataclass(frozen=True)
class BenchResult:
    model: str
    architecture: str
    load_s: float
    weights_mb: float
    prompt_tokens: int
    prefill_tok_s: float
    decode_tokens: int
    decode_tok_s: float
    time_to_first_token_s: float
    peak_rss_mb: float | None
    blas_threads: int | None


def peak_rss_mb() -> float | None:
    try:
        import resource
    except ImportError:          # Windows
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 / 1024 if sys.platform == "darwin" else rss / 1024   # bytes on macOS, KiB elsewhere


def prompt_ids(prompt_format: PromptFormat, n: int) -> list[int]:
    ids = prompt_format.encode_raw(_TEXT * (1 + n // 20))
    return ids[:n]


def run_bench(path: Path, prompt_tokens: int = 128, decode_tokens: int = 64, repeat: int = 1) -> BenchResult:
    t0 = time.perf_counter()
    lm = load_model(path)
    load_s = time.perf_counter() - t0
    fmt = PromptFormat.from_metadata(lm.metadata)
    ids = prompt_ids(fmt, prompt_tokens)
    n_blocks = -(-(len(ids) + decode_tokens + 1) // 16)
    kv = KVCache.allocate(lm.config, n_blocks, 16)
    best_prefill = best_decode = best_ttft = float("inf")
    for _ in range(max(1, repeat)):
        seq = SequenceBlocks(kv)
        t0 = time.perf_counter()
        logits = lm.model.forward(seq.step(ids), kv)[0]
        token = int(np.argmax(logits))
        t1 = time.perf_counter()
        for _ in range(decode_tokens):
            token = int(np.argmax(lm.model.forward(seq.step([token]), kv)[0]))
        t2 = time.perf_counter()
        best_prefill, best_ttft, best_decode = min(best_prefill, t1 - t0), min(best_ttft, t1 - t0), min(best_decode,
                                                                                                         t2 - t1)
    return BenchResult(
        model=path.name, architecture=lm.config.arch, load_s=round(load_s, 3),
        weights_mb=round(lm.weights.nbytes / 1e6, 1), prompt_tokens=len(ids),
        prefill_tok_s=round(len(ids) / best_prefill, 1), decode_tokens=decode_tokens,
        decode_tok_s=round(decode_tokens / best_decode, 1), time_to_first_token_s=round(best_ttft, 3),
        peak_rss_mb=round(peak_rss_mb(), 1) if peak_rss_mb() else None, blas_threads=blas_threads())


def format_result(r: BenchResult) -> str:
    rows = [("model", f"{r.model} ({r.architecture})"), ("load", f"{r.load_s:.2f} s ({r.weights_mb:.0f} MB float32)"),
            ("prefill", f"{r.prefill_tok_s:.1f} tok/s ({r.prompt_tokens} tokens)"),
            ("decode", f"{r.decode_tok_s:.1f} tok/s ({r.decode_tokens} tokens)"),
            ("time to first token", f"{r.time_to_first_token_s * 1000:.0f} ms"),
            ("peak RSS", f"{r.peak_rss_mb:.0f} MB" if r.peak_rss_mb else "unknown"),
            ("BLAS threads", str(r.blas_threads))]
    if r.model in LLAMA_CPP_2CORE:
        pre, dec = LLAMA_CPP_2CORE[r.model]
        rows.append(("vs llama.cpp (2 cores)", f"prefill {r.prefill_tok_s / pre:.2f}x, decode {r.decode_tok_s / dec:.2f}x"))
    return "\n".join(f"{k:>22}: {v}" for k, v in rows)


def as_dict(r: BenchResult) -> dict:
    return asdict(r)
