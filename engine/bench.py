"""`python -m engine bench`: load time, prefill and decode speed, time to first token, peak memory.
With --async on/off or --concurrency N it runs through the Engine instead (run_engine_bench below).

Measures the CPU forward pass directly (no engine thread), with the same shapes llama-bench uses:
a 128-token prompt, then 64 greedy decode tokens. One run per figure unless --repeat asks for more
(best of N is reported); the cores may be shared, so do not loop this.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from engine.errors import ContextOverflowError
from engine.model.arch import BLOCK_SIZE, DEFAULT_KV_CACHE_TYPE
from engine.model.blas import blas_threads
from engine.model.loader import load_model, open_model_file
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
    rss_before_load_mb: float | None = None   # resident just before the load: interpreter and libraries
    peak_since_load_mb: float | None = None   # the peak from the load on (peak_rss_mb: the whole run's)
    file_mb: float = 0.0
    kv_cache_mb: float = 0.0
    cpu_kernels: str = ""                     # engine.model.quant_matrix.describe_kernels()
    cpu_threads: int | None = None            # the compiled products' threads (None: the numpy path)
    warmup_s: float = 0.0                     # an 8-token step and a 1-token step before timing
    load_average: tuple[float, float, float] | None = None   # at the end: the cores may be shared


def peak_rss_mb() -> float | None:
    """The process's peak resident memory in MB (2^20 bytes) since it started or, on Linux, since the last
    reset_peak_rss(); None where the OS does not say."""
    if sys.platform == "win32":
        return _windows_peak_working_set_mb()
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration, ValueError, IndexError):
        pass
    try:
        import resource
    except ImportError:
        return None
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / 1024 / 1024 if sys.platform == "darwin" else rss / 1024   # bytes on macOS, KiB elsewhere


def reset_peak_rss() -> bool:
    """Start a new peak window (Linux: the high-water mark drops to what is resident now, /proc's clear_refs);
    False where the OS has no way, and peak_rss_mb() keeps counting from the start."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def resident_mb() -> float | None:
    """The process's resident memory now in MB (2^20 bytes), or None where the OS does not say. The bench
    reads it just before the load: the peak so far can be a transient (numba's compiler pages, given back
    once the kernels are ready: engine.model.quant_matrix.release_compiler_pages)."""
    if sys.platform == "win32":
        return _windows_working_set_mb(peak=False)
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def _windows_peak_working_set_mb() -> float | None:
    return _windows_working_set_mb(peak=True)


def _windows_working_set_mb(peak: bool) -> float | None:
    import ctypes
    from ctypes import wintypes

    class ProcessMemoryCounters(ctypes.Structure):
        _fields_ = [("cb", wintypes.DWORD), ("PageFaultCount", wintypes.DWORD),
                    ("PeakWorkingSetSize", ctypes.c_size_t), ("WorkingSetSize", ctypes.c_size_t),
                    ("QuotaPeakPagedPoolUsage", ctypes.c_size_t), ("QuotaPagedPoolUsage", ctypes.c_size_t),
                    ("QuotaPeakNonPagedPoolUsage", ctypes.c_size_t), ("QuotaNonPagedPoolUsage", ctypes.c_size_t),
                    ("PagefileUsage", ctypes.c_size_t), ("PeakPagefileUsage", ctypes.c_size_t)]

    counters = ProcessMemoryCounters(cb=ctypes.sizeof(ProcessMemoryCounters))
    psapi = ctypes.WinDLL("psapi")
    kernel32 = ctypes.WinDLL("kernel32")
    kernel32.GetCurrentProcess.restype = wintypes.HANDLE
    psapi.GetProcessMemoryInfo.argtypes = [wintypes.HANDLE, ctypes.POINTER(ProcessMemoryCounters), wintypes.DWORD]
    if not psapi.GetProcessMemoryInfo(kernel32.GetCurrentProcess(), ctypes.byref(counters), counters.cb):
        return None
    return (counters.PeakWorkingSetSize if peak else counters.WorkingSetSize) / 2**20


def prompt_text(n: int) -> str:
    """The bench's prompt text, long enough for n tokens in any tokenizer (cut to n after encoding)."""
    return _TEXT * (1 + n // 20)


def prompt_ids(prompt_format: PromptFormat, n: int) -> list[int]:
    return prompt_format.encode_raw(prompt_text(n))[:n]


def run_bench(path: Path, prompt_tokens: int = 128, decode_tokens: int = 64, repeat: int = 1) -> BenchResult:
    from engine.model.quant_matrix import describe_kernels, kernel_threads

    kernels = describe_kernels()            # imports numba (when present) before the baseline is taken
    # the model's share: the peak from the load on minus what is resident just before it (the peak before it
    # can be a transient: numba's compiler pages, given back once the kernels are ready)
    peak_before = peak_rss_mb()
    before = resident_mb() or peak_before
    if not reset_peak_rss():
        before = peak_before
    t0 = time.perf_counter()
    with open_model_file(path) as gguf:    # the tokenizer first, as engine.core.build does
        fmt = PromptFormat.from_metadata(gguf.metadata)
        lm = load_model(path, gguf=gguf)
    load_s = time.perf_counter() - t0
    ids = prompt_ids(fmt, prompt_tokens)
    if len(ids) + decode_tokens > lm.config.context_length:     # (one prefill step: its mask alone is n x n)
        raise ContextOverflowError(f"{len(ids):,} prompt + {decode_tokens:,} decoded tokens do not fit the model's "
                                   f"context of {lm.config.context_length:,} tokens; ask for fewer.")
    n_blocks = -(-(len(ids) + decode_tokens + 1) // BLOCK_SIZE)
    kv = KVCache.allocate(lm.config, n_blocks, BLOCK_SIZE)
    t0 = time.perf_counter()         # first steps (the kernels were readied by the load: compiled or cached)
    warm = SequenceBlocks(kv)
    lm.model.forward(warm.step(ids[:8]), kv)
    lm.model.forward(warm.step(ids[:1]), kv)
    warmup_s = time.perf_counter() - t0
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
        peak_rss_mb=_rounded(max(peak_before or 0.0, peak_rss_mb() or 0.0) or None), blas_threads=blas_threads(),
        peak_since_load_mb=_rounded(peak_rss_mb()), rss_before_load_mb=_rounded(before),
        file_mb=round(path.stat().st_size / 2**20, 1),
        kv_cache_mb=round(kv.nbytes / 2**20, 1), cpu_kernels=kernels, cpu_threads=kernel_threads(),
        warmup_s=round(warmup_s, 2),
        load_average=_load_average())


def _load_average() -> tuple[float, float, float] | None:
    return os.getloadavg() if hasattr(os, "getloadavg") else None


def format_result(r: BenchResult) -> str:
    rows = [("model", f"{r.model} ({r.architecture})"), ("CPU path", r.cpu_kernels or "unknown"),
            ("load", f"{r.load_s:.2f} s (weights held: {r.weights_mb:.0f} MB; file {r.file_mb:.0f} MiB; includes "
                     f"the tokenizer and readying the kernels: numba's cache read, or a compile the first time)"),
            ("warm-up", f"{r.warmup_s:.2f} s (first 8-token and 1-token steps; the load readied the kernels)"),
            ("prefill", f"{r.prefill_tok_s:.1f} tok/s ({r.prompt_tokens} tokens)"),
            ("decode", f"{r.decode_tok_s:.1f} tok/s ({r.decode_tokens} tokens)"),
            ("time to first token", f"{r.time_to_first_token_s * 1000:.0f} ms"),
            ("peak RSS", _rss_line(r)),
            ("BLAS threads", str(r.blas_threads)),
            ("load average", ", ".join(f"{x:.2f}" for x in r.load_average) if r.load_average else "unknown")]
    if r.model in LLAMA_CPP_2CORE:
        pre, dec = LLAMA_CPP_2CORE[r.model]
        rows.append(("vs llama.cpp (2 cores)", f"prefill {r.prefill_tok_s / pre:.2f}x, decode {r.decode_tok_s / dec:.2f}x"))
    return "\n".join(f"{k:>22}: {v}" for k, v in rows)


def memory_goal_mb(file_mb: float, kv_cache_mb: float) -> float:
    """Issue 18's CPU memory goal: peak RSS at most 1.5x the model file plus its KV cache."""
    return 1.5 * file_mb + kv_cache_mb


def _rss_line(r: BenchResult) -> str:
    """The whole process's peak RSS against the goal, and the model's share of it: the peak minus what was
    resident just before the load (the interpreter and libraries)."""
    if not r.peak_rss_mb:
        return "unknown"
    goal = memory_goal_mb(r.file_mb, r.kv_cache_mb)
    line = f"{r.peak_rss_mb:.0f} MiB, the whole process (goal <= 1.5x file + KV = {goal:.0f} MiB)"
    if r.rss_before_load_mb:
        added = (r.peak_since_load_mb or r.peak_rss_mb) - r.rss_before_load_mb
        line += (f"; {r.rss_before_load_mb:.0f} MiB resident before the load (interpreter and libraries), "
                 f"so the model's share is {added:.0f} MiB = {added / r.file_mb:.2f}x the file")
    return line


def as_dict(r: BenchResult) -> dict:
    return asdict(r)


# ---- through the Engine: continuous batching, async scheduling on/off --------------------------------
@dataclass(frozen=True)
class EngineBenchResult:
    model: str
    backend: str
    async_scheduling: bool
    async_reason: str
    concurrency: int
    prompt_tokens: int
    generated_tokens: int            # all requests together
    wall_s: float                    # first submit to last Finished
    aggregate_tok_s: float           # generated tokens / wall time, all requests together
    decode_tok_s_per_request: float  # mean of each request's decode rate (after its first token)
    steady_decode_tok_s: float       # all requests together while every one of them decodes (after the last
                                     # first token, before the first Finished): what llama-batched-bench's S_TG
                                     # counts, B sequences in each step and no prefill (steady_decode_rate)
    time_to_first_token_s: float     # mean
    load_s: float                    # Engine.load up to ready (weights uploaded, kernels loaded from the cache)
    open_s: float                    # Engine.load to its first progress report: header parsed, pre-flight done,
                                     # the first tensor in (the goal: under a second, whatever the model's size)
    load_average: tuple[float, float, float] | None
    peak_rss_mb: float | None = None  # the whole process (the Engine's threads, its model, this bench)
    rss_before_load_mb: float | None = None   # resident before Engine.load (resident_mb)
    kv_cache_type: str = ""           # what the loaded model's KV cache holds (ModelInfo.kv_cache_type)


def run_engine_bench(path: Path, async_on: bool, concurrency: int = 1, prompt_tokens: int = 128,
                     decode_tokens: int = 64, backend: str = "cpu",
                     kv_cache_type: str = DEFAULT_KV_CACHE_TYPE) -> EngineBenchResult:
    """`concurrency` raw-text requests of `prompt_tokens` tokens submitted at once, greedy, `decode_tokens`
    each (fewer if the model emits a stop id). The same round runs once untimed first, as llama-batched-bench
    warms up: a GPU engine captures a decode graph the first time it steps each batch size (one per size the
    round passes through as requests start and finish, each a few ms of the host), which a serving engine pays
    once. `kv_cache_type`: the Engine's (the CPU keeps f32; the result says what the cache held)."""
    from engine.api import Finished, GenerateRequest, SamplingParams, TextDelta
    from engine.engine import Engine

    engine = Engine(backend=backend, async_scheduling=async_on, max_num_seqs=max(8, concurrency),
                    kv_cache_tokens=concurrency * (prompt_tokens + decode_tokens + 32), kv_cache_type=kv_cache_type)
    before = resident_mb()
    try:
        first_report: list[float] = []
        t_load = time.perf_counter()
        info = engine.load(path, progress=lambda _p: first_report or first_report.append(time.perf_counter())
                           ).result()
        load_s = time.perf_counter() - t_load
        open_s = (first_report[0] if first_report else time.perf_counter()) - t_load
        fmt = engine._model.prompt_format
        text = fmt.tokenizer.decode(prompt_ids(fmt, prompt_tokens))
        params = SamplingParams.greedy(max_tokens=decode_tokens)
        for h in [engine.submit(GenerateRequest(prompt=text, params=params)) for _ in range(concurrency)]:
            h.text()                                   # the warm-up round
        deltas: list[tuple[float, str, int]] = []     # (when, request, tokens) of each TextDelta
        finishes: list[float] = []                    # when each Finished arrived
        finished = threading.Semaphore(0)

        def sink(event) -> None:                       # the engine thread: record, never block
            if isinstance(event, TextDelta):
                deltas.append((time.perf_counter(), event.request_id, len(event.token_ids)))
            elif isinstance(event, Finished):
                finishes.append(time.perf_counter())
                finished.release()

        t0 = time.perf_counter()
        handles = [engine.submit(GenerateRequest(prompt=text, params=params), sink=sink) for _ in range(concurrency)]
        for _ in handles:
            finished.acquire()
        wall = time.perf_counter() - t0
        fins = [h.finished for h in handles]
    finally:
        engine.shutdown()
    errors = [f.error for f in fins if f.reason == "error"]
    if errors:
        raise RuntimeError(f"bench request failed: {errors[0]}")
    generated = sum(f.usage.generated_tokens for f in fins)
    return EngineBenchResult(
        model=path.name, backend=info.backend, async_scheduling=info.async_scheduling,
        async_reason=info.async_reason, concurrency=concurrency, prompt_tokens=fins[0].usage.prompt_tokens,
        generated_tokens=generated, wall_s=round(wall, 3), aggregate_tok_s=round(generated / wall, 1),
        decode_tok_s_per_request=round(sum(f.usage.decode_tokens_per_s for f in fins) / len(fins), 1),
        steady_decode_tok_s=round(steady_decode_rate(deltas, min(finishes)), 1),
        time_to_first_token_s=round(sum(f.usage.time_to_first_token_s for f in fins) / len(fins), 3),
        load_s=round(load_s, 3), open_s=round(open_s, 3), load_average=_load_average(),
        peak_rss_mb=_rounded(peak_rss_mb()), rss_before_load_mb=_rounded(before), kv_cache_type=info.kv_cache_type)


def steady_decode_rate(deltas: list[tuple[float, str, int]], first_finish: float) -> float:
    """Aggregate tokens per second while every request decodes: after the last request's first token and up to
    the first Finished (before it, requests still prefill and steps hold fewer sequences; after it, the batch
    shrinks one finish at a time). Each request's rate is taken between its own first and last token inside that
    window (its tokens arrive once per step, so the rates are step-aligned whatever order a step's events come
    in), and the rates are summed. 0 when some request has fewer than two tokens inside the window."""
    first: dict[str, float] = {}
    for when, rid, n in deltas:
        if n:
            first.setdefault(rid, when)
    if not first:
        return 0.0
    start = max(first.values())
    inside: dict[str, list[tuple[float, int]]] = {rid: [] for rid in first}
    for when, rid, n in deltas:
        if n and start < when <= first_finish:
            inside[rid].append((when, n))
    total = 0.0
    for seen in inside.values():
        if len(seen) < 2 or seen[-1][0] <= seen[0][0]:
            return 0.0
        total += sum(n for _, n in seen[1:]) / (seen[-1][0] - seen[0][0])
    return total


def _rounded(mb: float | None) -> float | None:
    return None if mb is None else round(mb, 1)


def format_engine_result(r: EngineBenchResult) -> str:
    load = ", ".join(f"{x:.2f}" for x in r.load_average) if r.load_average else "unknown"
    rows = [("model", f"{r.model} on {r.backend}"),
            ("KV cache", r.kv_cache_type),
            ("async scheduling", f"{'on' if r.async_scheduling else 'off'} ({r.async_reason})"),
            ("concurrency", f"{r.concurrency} requests x {r.prompt_tokens} prompt tokens"),
            ("aggregate", f"{r.aggregate_tok_s:.1f} tok/s ({r.generated_tokens} tokens in {r.wall_s:.2f} s)"),
            ("decode per request", f"{r.decode_tok_s_per_request:.1f} tok/s (mean)"),
            ("steady decode", f"{r.steady_decode_tok_s:.1f} tok/s, all requests together while every one decodes"
                              if r.steady_decode_tok_s else "no step had every request decoding"),
            ("time to first token", f"{r.time_to_first_token_s * 1000:.0f} ms (mean)"),
            ("model load", f"{r.load_s:.2f} s (open: {r.open_s * 1000:.0f} ms to the first weights streamed)"),
            ("load average", load)]
    if r.peak_rss_mb:
        before = f"; {r.rss_before_load_mb:.0f} MiB resident before the load" if r.rss_before_load_mb else ""
        rows.append(("peak RSS", f"{r.peak_rss_mb:.0f} MiB, the whole process{before}"))
    return "\n".join(f"{k:>22}: {v}" for k, v in rows)
