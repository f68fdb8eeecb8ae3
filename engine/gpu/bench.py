"""GPU benchmark: `run_bench(model_path, backend_name, ...) -> dict`, llama-bench's shapes (128-token prompt,
64 greedy decode tokens). Figures: load time, prefill tok/s, time to first token, decode tok/s (graph
replay, ids fed on the device, readback pipelined two deep) and eager decode for comparison, device memory
used, kernel launches per decoded token, share of decode wall time spent in Python, effective weight
bandwidth next to a device-to-device copy measured in the same run, and a per-kernel GPU time breakdown
of one decode step (events captured between the kernels of a graph).
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from engine.backends import registry
from engine.backends.async_output import ReadbackPool
from engine.gpu.model import GpuModel
from engine.model.step import StepInput

# llama.cpp on an H200, same shapes (../shared/reference/README.md): (prefill pp128, decode tg64) tok/s
LLAMA_CPP_H200 = {"smollm2": (16754, 921), "gemma": (24339, 975), "qwen3-4b": (7439, 338)}
LAYER_ROLES = ("qkv matmul", "rope+kv write", "attention", "wo matmul", "add+norm", "gate/up glu",
               "down matmul", "add+norm")


def reference_for(path: Path) -> tuple[int, int] | None:
    name = Path(path).name.lower()
    return next((v for k, v in LLAMA_CPP_H200.items() if k in name), None)


def _step(ids, start: int, n_blocks: int, bs: int) -> StepInput:
    positions = np.arange(start, start + len(ids), dtype=np.int32)
    return StepInput(token_ids=np.asarray(ids, np.int32), positions=positions, slot_mapping=positions.astype(np.int64),
                     query_start_loc=np.array([0, len(ids)], np.int32),
                     seq_lens=np.array([start + len(ids)], np.int32),
                     block_tables=np.arange(n_blocks, dtype=np.int32)[None, :])


def copy_bandwidth(backend, nbytes: int = 1 << 30, repeat: int = 5) -> float:
    """GB/s of a device-to-device copy, counting bytes read plus bytes written (median of `repeat`)."""
    a, b = backend.alloc(nbytes, np.uint8), backend.alloc(nbytes, np.uint8)
    s = backend.create_stream()
    e0, e1 = backend.create_event(timing=True), backend.create_event(timing=True)
    try:
        backend.copy_d2d_async(b, a, s)
        times = []
        for _ in range(repeat):
            e0.record(s)
            backend.copy_d2d_async(b, a, s)
            e1.record(s)
            e1.synchronize()
            times.append(backend.elapsed_ms(e0, e1))
        return 2 * nbytes / (statistics.median(times) / 1e3) / 1e9
    finally:
        backend.free(a)
        backend.free(b)
        backend.destroy_event(e0)
        backend.destroy_event(e1)
        backend.destroy_stream(s)


def kernel_breakdown(gm: GpuModel, kv) -> dict[str, float] | None:
    """GPU microseconds per role for one decode step: a graph of the decode body with a timing event
    after every kernel, replayed once; None where events cannot be captured."""
    fwd, backend, rt = gm.fwd, gm.backend, gm.rt
    n = gm.launches_per_step(kv, 1)
    if n is None or rt is None:
        return None
    events = [backend.create_event(timing=True) for _ in range(n + 1)]
    names: list[str] = []
    original = fwd._launch

    def timed(file, name, grid, block, args, shared=0):
        original(file, name, grid, block, args, shared)
        names.append(name)
        events[len(names)].record(fwd.stream)

    fwd._launch = timed
    try:
        rt.stream_begin_capture(fwd.stream.handle)
        try:
            events[0].record(fwd.stream)
            fwd.enqueue_body(kv, 1, 1, True, True)
        finally:
            graph = rt.stream_end_capture(fwd.stream.handle)
        graph_exec = rt.graph_instantiate(graph)
        rt.graph_launch(graph_exec, fwd.stream.handle)
        fwd.stream.synchronize()
        times = [backend.elapsed_ms(events[i], events[i + 1]) * 1e3 for i in range(n)]
        rt.graph_exec_destroy(graph_exec)
        rt.graph_destroy(graph)
    except Exception:   # noqa: BLE001 - a runtime without event nodes in graphs: no breakdown
        return None
    finally:
        fwd._launch = original
        for e in events:
            backend.destroy_event(e)
    roles: dict[str, float] = {}
    for i, us in enumerate(times):
        if i == 0:
            role = "embedding+norm"
        elif i >= n - 2:
            role = "lm head" if i == n - 2 else "sampler"
        else:
            role = LAYER_ROLES[(i - 1) % len(LAYER_ROLES)]
        roles[role] = roles.get(role, 0.0) + us
    return roles


def run_bench(model_path, backend_name: str = "cuda-python", prompt_tokens: int = 128, decode_tokens: int = 64,
              repeat: int = 3, backend=None) -> dict:
    path = Path(model_path)
    own = backend is None
    backend = backend or registry.create(backend_name)
    result: dict = {"model": path.name, "backend": backend.name}
    try:
        free0 = backend.memory_info().free
        t0 = time.perf_counter()
        gm = GpuModel.load(path, backend, max_tokens=max(prompt_tokens, 16), max_seqs=4,
                           kv_blocks=-(-(prompt_tokens + decode_tokens + 32) // 16))
        bs = 16
        n_blocks = -(-(prompt_tokens + decode_tokens + 32) // bs)
        kv = gm.new_kv_cache(n_blocks, bs)
        pool = ReadbackPool(backend, slots=3)
        result["load_s"] = time.perf_counter() - t0
        result["device_mb"] = (free0 - backend.memory_info().free) / 2**20
        result["weights_mb"] = gm.fwd.w.nbytes / 2**20
        c = gm.config
        prompt = [(i * 7919 + 13) % c.vocab_size for i in range(prompt_tokens)]
        prefill = _step(prompt, 0, n_blocks, bs)
        # first run compiles nothing (warm_up did) but touches everything once
        gm.step(prefill, kv, pool, feed_next=True).get_output()
        ttfts = []
        for _ in range(repeat):
            a = time.perf_counter()
            gm.step(prefill, kv, pool, feed_next=True).get_output()
            ttfts.append(time.perf_counter() - a)
        ttft = statistics.median(ttfts)
        result["ttft_ms"] = ttft * 1e3
        result["prefill_tok_s"] = prompt_tokens / ttft
        result.update(_decode(gm, kv, pool, prompt, n_blocks, bs, decode_tokens, repeat))
        result["launches_per_token"] = gm.launches_per_step(kv, 1)
        gm.use_graphs = False
        eager = _decode(gm, kv, pool, prompt, n_blocks, bs, min(decode_tokens, 16), 1)
        gm.use_graphs = True
        result["eager_decode_tok_s"] = eager["decode_tok_s"]
        result["eager_python_share"] = eager["python_share"]
        per_token_s = 1.0 / result["decode_tok_s"]
        result["weight_bytes_per_token_mb"] = gm.fwd.w.matrix_bytes / 2**20
        result["weight_gb_s"] = gm.fwd.w.matrix_bytes / per_token_s / 1e9
        result["d2d_copy_gb_s"] = copy_bandwidth(backend)
        result["breakdown_us"] = kernel_breakdown(gm, kv)
        ref = reference_for(path)
        if ref:
            result["llama_cpp_prefill_tok_s"], result["llama_cpp_decode_tok_s"] = ref
            result["prefill_vs_llama_cpp"] = result["prefill_tok_s"] / ref[0]
            result["decode_vs_llama_cpp"] = result["decode_tok_s"] / ref[1]
        pool.close()
        kv.free()
        gm.close()
    finally:
        if own:
            backend.close()
    return result


def _decode(gm: GpuModel, kv, pool, prompt, n_blocks: int, bs: int, n: int, repeat: int) -> dict:
    """n greedy tokens after the prompt, input ids fed on the device; best of `repeat` runs."""
    P = len(prompt)
    best = None
    for r in range(repeat + 1):                     # run 0 captures the graph and warms up
        pending, python_s = [], 0.0
        a = time.perf_counter()
        for i in range(n):
            b = time.perf_counter()
            st = _step([0], P + i, n_blocks, bs)    # the id is ignored: it comes from the device
            pending.append(gm.step(st, kv, pool, ids_on_device=True, feed_next=True))
            python_s += time.perf_counter() - b
            if len(pending) == 2:
                pending.pop(0).get_output()
        for p in pending:
            p.get_output()
        wall = time.perf_counter() - a
        if r and (best is None or wall < best[0]):
            best = (wall, python_s)
    wall, python_s = best
    return {"decode_tok_s": n / wall, "decode_ms_per_token": wall / n * 1e3, "python_share": python_s / wall}


def format_result(r: dict) -> str:
    lines = [f"{r['model']} on {r['backend']}:",
             f"  load {r['load_s']:.2f} s, device memory used {r['device_mb']:.0f} MiB (weights {r['weights_mb']:.0f} MiB)",
             f"  prefill {r['prefill_tok_s']:.0f} tok/s (128 tokens), TTFT {r['ttft_ms']:.2f} ms",
             f"  decode {r['decode_tok_s']:.0f} tok/s ({r['decode_ms_per_token']:.3f} ms/token, graph), "
             f"eager {r['eager_decode_tok_s']:.0f} tok/s",
             f"  launches per token {r['launches_per_token']}, Python share of decode {100 * r['python_share']:.1f}% "
             f"(eager {100 * r['eager_python_share']:.1f}%)",
             f"  weights {r['weight_bytes_per_token_mb']:.0f} MiB/token -> {r['weight_gb_s']:.0f} GB/s effective; "
             f"D2D copy {r['d2d_copy_gb_s']:.0f} GB/s"]
    if "llama_cpp_decode_tok_s" in r:
        lines.append(f"  vs llama.cpp H200: prefill {r['prefill_vs_llama_cpp']:.2f}x of {r['llama_cpp_prefill_tok_s']}, "
                     f"decode {r['decode_vs_llama_cpp']:.2f}x of {r['llama_cpp_decode_tok_s']}")
    if r.get("breakdown_us"):
        total = sum(r["breakdown_us"].values())
        parts = ", ".join(f"{k} {v:.0f} us ({100 * v / total:.0f}%)" for k, v in
                          sorted(r["breakdown_us"].items(), key=lambda kv: -kv[1]))
        lines.append(f"  one decode step on the GPU: {total:.0f} us = {parts}")
    return "\n".join(lines)
