"""GPU benchmark: `run_bench(model_path, backend_name, ...) -> dict`, llama-bench's shapes (128-token prompt,
64 greedy decode tokens). Figures: load time, prefill tok/s, time to first token, decode tok/s (graph
replay, ids fed on the device, readback pipelined two deep) and eager decode for comparison, device memory
used, kernel launches per decoded token, share of decode wall time spent in Python, effective weight
bandwidth next to a device-to-device copy measured in the same run, and a per-kernel GPU time breakdown
of one decode step (events captured between the kernels of a graph). Every bench takes `kv_type`
(engine.model.arch.KV_CACHE_TYPES, default f32) and says in its first result line which type the cache held.
"""
from __future__ import annotations

import statistics
import time
from pathlib import Path

import numpy as np

from engine.backends import registry
from engine.backends.async_output import ReadbackPool
from engine.core.setup import device_prefill_chunk
from engine.gpu import forward as forward_mod
from engine.gpu.model import GpuModel
from engine.model.arch import BLOCK_SIZE, DEFAULT_KV_CACHE_TYPE
from engine.model.step import StepInput

# llama.cpp on an H200, same shape-alike files (../shared/reference/README.md): prefill tok/s by prompt length
# (`llama-bench -p N`, 512-token ubatches) and decode tok/s by depth (tg64; depth 0 is plain `-n 64`). A figure is
# compared only with ours at the same length: llama.cpp's pp512 is ~1.8x its pp128 on the 4B shapes.
LLAMA_CPP_H200 = {
    "qwen35-4b": {"prefill": {128: 6060, 512: 11078}, "decode": {0: 282}},
    "smollm2": {"prefill": {128: 16754}, "decode": {0: 921}},
    "gemma": {"prefill": {128: 24339}, "decode": {0: 975}},
    "qwen3-4b": {"prefill": {128: 7439, 512: 13369, 4096: 13762, 16384: 11773},
                 "decode": {0: 338, 4096: 294, 16384: 243}},
    "qwen3moe-30b": {"prefill": {128: 4334, 512: 9926}, "decode": {0: 299}},
}
LAYER_ROLES = ("qkv matmul", "rope+kv write", "attention", "wo matmul", "add+norm", "gate/up glu",
               "down matmul", "add+norm")
MOE_LAYER_ROLES = ("qkv matmul", "rope+kv write", "attention", "wo matmul", "add+norm", "router matmul",
                   "moe top-k", "moe gate/up", "moe down", "add+norm")        # engine.gpu.moe, decode
MOE_PREFILL_ROLES = ("qkv matmul", "rope+kv write", "attention", "wo matmul", "add+norm", "router matmul",
                     "moe top-k", "moe sort", "moe gate/up", "moe down", "moe combine", "add+norm")


def reference_for(path: Path, prompt_tokens: int, depth: int) -> tuple[int | None, int | None]:
    """llama.cpp's (prefill tok/s for a `prompt_tokens` prompt, decode tok/s at `depth`) for this shape-alike file;
    None where it has no figure for that length (a ratio against another length's figure would mislead)."""
    name = Path(path).name.lower()
    ref = next((v for k, v in LLAMA_CPP_H200.items() if k in name), None)
    if ref is None:
        return None, None
    return ref["prefill"].get(prompt_tokens), ref["decode"].get(depth)


def compare_with_llama_cpp(result: dict, path: Path, prompt_tokens: int, depth: int) -> None:
    """Adds llama_cpp_{prefill,decode}_tok_s and {prefill,decode}_vs_llama_cpp where llama.cpp has the figure."""
    prefill, decode = reference_for(path, prompt_tokens, depth)
    if prefill and "prefill_tok_s" in result:
        result["llama_cpp_prefill_tok_s"] = prefill
        result["prefill_vs_llama_cpp"] = result["prefill_tok_s"] / prefill
    if decode:
        result["llama_cpp_decode_tok_s"] = decode
        result["decode_vs_llama_cpp"] = result["decode_tok_s"] / decode


def _llama_cpp_line(r: dict, prompt_tokens: int, depth: int) -> str | None:
    parts = []
    if "prefill_vs_llama_cpp" in r:
        parts.append(f"prefill {r['prefill_vs_llama_cpp']:.2f}x of {r['llama_cpp_prefill_tok_s']} (pp{prompt_tokens})")
    if "decode_vs_llama_cpp" in r:
        parts.append(f"decode {r['decode_vs_llama_cpp']:.2f}x of {r['llama_cpp_decode_tok_s']} "
                     f"(tg64 at depth {depth})")
    return "  vs llama.cpp H200: " + ", ".join(parts) if parts else None


def bench_prompt(vocab_size: int, n: int) -> list[int]:
    """The benchmarks' synthetic prompt of n ids (spread over the vocabulary; the same for every run and model)."""
    return [(i * 7919 + 13) % vocab_size for i in range(n)]


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


# pre-passes with roles of their own: the tch tile's activation split (before the matmul whose input it splits),
# the float32 cache's key split (before the attention that reads it)
PRE_PASS_ROLES = {"halo_split_f16": "f16 split", "halo_kv_split": "kv split"}


def _launch_roles(names: list[str], n_layers: int, layer_roles=LAYER_ROLES) -> list[str]:
    """The role of each launch of a step body. The i-th main launch has a fixed role (len(layer_roles) per layer
    between the embedding and the LM head + sampler); a split-K sum belongs to the matmul just before it, the
    split-KV merge to the attention before it, the MoE th tiles' row lists (halo_moe_tile_rows) to the sort before
    them; the tch tile's activation split (halo_split_f16) and a float32 cache's key split (halo_kv_split, before
    the attention that reads it) are roles of their own."""
    roles: list[str] = []
    i, role = -1, ""
    per = len(layer_roles)
    for name in names:
        if name in PRE_PASS_ROLES:
            roles.append(PRE_PASS_ROLES[name])
            continue
        if name not in ("halo_splitk_sum", "halo_attention_merge", "halo_moe_tile_rows"):
            i += 1
            if i == 0:
                role = "embedding+norm"
            elif i > per * n_layers:
                role = "lm head" if i == per * n_layers + 1 else "sampler"
            else:
                role = layer_roles[(i - 1) % per]
        roles.append(role)
    assert i >= per * n_layers + 1
    return roles


def _role_names(gm: GpuModel, T: int, names: list[str]) -> list[str]:
    """Roles by kernel name for hybrid models (two layer kinds of different launch counts), else by position."""
    if gm.config.has_recurrent_state:
        return list(names)
    c = gm.config
    return _launch_roles(names, c.n_layers, LAYER_ROLES if c.ffn_kind != "moe" else
                         MOE_LAYER_ROLES if T == 1 else MOE_PREFILL_ROLES)


def _role_graphs_us(gm: GpuModel, launches: list[tuple], roles: list[str], replays: int = 5) -> dict[str, float]:
    """GPU microseconds per role: the role's launches (one per layer, each on its own layer's weights, so the L2
    holds none of them from the previous launch) captured into a graph of their own, replayed, median time.
    Timing inside one graph of the whole step would need timing events in graphs, which the runtimes refuse."""
    fwd, backend, rt = gm.fwd, gm.backend, gm.rt
    e0, e1 = backend.create_event(timing=True), backend.create_event(timing=True)
    out: dict[str, float] = {}
    try:
        for role in dict.fromkeys(roles):
            backend.begin_capture(fwd.stream)
            try:
                for launch, r in zip(launches, roles, strict=True):
                    if r == role:
                        backend.launch(fwd.kern(launch[0], launch[1]), *launch[2:5], fwd.stream, launch[5])
            finally:
                g = backend.end_capture(fwd.stream)
            ge = rt.graph_instantiate(g)
            times = []
            for _ in range(replays + 1):
                e0.record(fwd.stream)
                rt.graph_launch(ge, fwd.stream.handle)
                e1.record(fwd.stream)
                e1.synchronize()
                times.append(backend.elapsed_ms(e0, e1) * 1e3)
            rt.graph_exec_destroy(ge)
            rt.graph_destroy(g)
            out[role] = statistics.median(times[1:])
    finally:
        backend.destroy_event(e0)
        backend.destroy_event(e1)
    return out


def kernel_breakdown(gm: GpuModel, kv, T: int = 1, graph: bool = True,
                     by_kernel: bool = False) -> tuple[dict[str, float] | None, str]:
    """GPU microseconds per role for one step of T tokens (logits for one row), over the step metadata already
    on the device. graph (decode steps, where a kernel takes a few microseconds and eager timing would mostly
    measure launch and event overhead): each role's launches replayed as a graph of their own
    (_role_graphs_us). Otherwise (or without graphs) the body is enqueued eagerly behind ~10 ms of
    device-to-device copies, so the GPU never waits for Python between the timed kernels (each boundary
    still adds a few us of event overhead: fine for prefill steps of milliseconds). by_kernel (eager only): keyed
    by kernel name, "name xN" with N its launches, instead of by role."""
    fwd, backend, rt = gm.fwd, gm.backend, gm.rt
    names: list[str] = []
    original = fwd._launch
    try:
        if graph and rt is not None and not by_kernel:
            launches: list[tuple] = []

            def record(file, name, grid, block, args, shared=0):
                launches.append((file, name, grid, block, args, shared))
                names.append(name)

            fwd._launch = record
            try:
                fwd.enqueue_body(kv, T, 1, True, True)      # recorded, not launched
            finally:
                fwd._launch = original
            return _role_graphs_us(gm, launches, _role_names(gm, T, names)), "each role's launches as one graph"
        events = [backend.create_event(timing=True)]

        def timed(file, name, grid, block, args, shared=0):
            original(file, name, grid, block, args, shared)
            names.append(name)
            events.append(backend.create_event(timing=True))
            events[-1].record(fwd.stream)

        fwd._launch = timed
        a, b = backend.alloc(1 << 30, np.uint8), backend.alloc(1 << 30, np.uint8)
        try:
            for _ in range(20):                     # ~0.5 ms each: the GPU stays ahead of Python
                backend.copy_d2d_async(b, a, fwd.stream)
            events[0].record(fwd.stream)
            fwd.enqueue_body(kv, T, 1, True, True)
            fwd.stream.synchronize()
            times = [backend.elapsed_ms(events[i], events[i + 1]) * 1e3 for i in range(len(events) - 1)]
        finally:
            fwd._launch = original
            backend.free(a)
            backend.free(b)
            for ev in events:
                backend.destroy_event(ev)
        if by_kernel:
            per: dict[str, list] = {}
            for us, name in zip(times, names, strict=True):
                entry = per.setdefault(name, [0.0, 0])
                entry[0] += us
                entry[1] += 1
            return {f"{name} x{n}": us for name, (us, n) in per.items()}, "eager behind copies, by kernel"
        roles: dict[str, float] = {}
        for us, role in zip(times, _role_names(gm, T, names), strict=True):
            roles[role] = roles.get(role, 0.0) + us
        return roles, "eager behind copies"
    except Exception as e:  # noqa: BLE001 - no breakdown at all
        fwd.stream.synchronize()
        return None, f"failed: {type(e).__name__}: {str(e)[:120]}"
    finally:
        fwd._launch = original


def run_bench(model_path, backend_name: str = "cuda-python", prompt_tokens: int = 128, decode_tokens: int = 64,
              repeat: int = 3, backend=None, kv_type: str = DEFAULT_KV_CACHE_TYPE) -> dict:
    if prompt_tokens > LONG_PROMPT:
        return run_long_bench(model_path, backend_name, prompt_tokens, decode_tokens, backend=backend, kv_type=kv_type)
    path = Path(model_path)
    own = backend is None
    backend = backend or registry.create(backend_name)
    result: dict = {"model": path.name, "backend": backend.name}
    try:
        free0 = backend.memory_info().free
        streaming: list[float] = []          # when the first weight bytes were queued: the model is open
        t0 = time.perf_counter()
        gm = GpuModel.load(path, backend, max_tokens=max(prompt_tokens, 16), max_seqs=4,
                           kv_blocks=-(-(prompt_tokens + decode_tokens + 32) // BLOCK_SIZE),
                           progress=lambda *_: streaming or streaming.append(time.perf_counter()), kv_type=kv_type)
        bs = BLOCK_SIZE
        n_blocks = -(-(prompt_tokens + decode_tokens + 32) // bs)
        kv = gm.new_kv_cache(n_blocks, bs)
        result["kv_type"] = kv.kv_type
        pool = ReadbackPool(backend, slots=3)
        result["load_s"] = time.perf_counter() - t0
        result["open_s"] = streaming[0] - t0 if streaming else result["load_s"]
        result["device_mb"] = (free0 - backend.memory_info().free) / 2**20
        result["weights_mb"] = gm.fwd.w.nbytes / 2**20
        c = gm.config
        prompt = bench_prompt(c.vocab_size, prompt_tokens)
        prefill = _step(prompt, 0, n_blocks, bs)
        # first run compiles nothing (warm_up did) but touches everything once
        ttft = _median_prefill_s(gm, prefill, kv, pool, repeat)
        result["ttft_ms"] = ttft * 1e3
        result["prefill_tok_s"] = prompt_tokens / ttft
        result["prefill_tokens"] = prompt_tokens
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
        result["breakdown_us"], result["breakdown_how"] = kernel_breakdown(gm, kv, 1)
        # kernel_breakdown replays the body over the metadata already on the device: a prefill's, here (after
        # the decode runs it held a one-token step, which the attention and delta-rule kernels would time)
        gm.step(prefill, kv, pool, feed_next=True).get_output()
        result["prefill_breakdown_us"], _ = kernel_breakdown(gm, kv, prompt_tokens, graph=False)
        tc_tile = {"auto": f"tc below {forward_mod.PIPELINED_MIN_WEIGHTS} weights per product, above it tch for "
                           "Q4_K / Q6_K products, else tcp matmuls and tc GLUs",
                   "tch": "tch for Q4_K / Q6_K products, else tcp matmuls and tc GLUs",
                   "tck": "tck for Q4_K / Q6_K products, else tcp matmuls and tc GLUs"}.get(forward_mod.TC_TILE,
                                                                                            forward_mod.TC_TILE)
        result["prefill_tile"] = f"tensor cores ({tc_tile})" if gm.fwd.use_tc else "SIMT (gt)"
        if gm.fwd.use_tc:                                # how the split-K target moves prefill (tuning)
            default, fwd = forward_mod.SPLIT_TARGET_BLOCKS, gm.fwd
            sweep, own_partial = {}, (fwd.partial, fwd.partial_cap)
            fwd.partial_cap = 4 * own_partial[1]           # room for the larger targets' partial sums
            fwd.partial = backend.alloc(fwd.partial_cap, np.float32)
            try:
                for target in (256, 512, 1024, 2048):
                    forward_mod.SPLIT_TARGET_BLOCKS = target
                    sweep[target] = prompt_tokens / _median_prefill_s(gm, prefill, kv, pool, repeat)
            finally:
                forward_mod.SPLIT_TARGET_BLOCKS = default
                backend.synchronize()
                backend.free(fwd.partial)
                fwd.partial, fwd.partial_cap = own_partial
            result["prefill_tok_s_by_split_target"] = sweep
            own_tile, forward_mod.TC_TILE = forward_mod.TC_TILE, "tc"    # the first tensor-core tile, for comparison
            try:
                result["first_tc_prefill_tok_s"] = prompt_tokens / _median_prefill_s(gm, prefill, kv, pool, repeat)
            finally:
                forward_mod.TC_TILE = own_tile
            forward_mod.SIMT_TILES = True                # the SIMT tile HIP runs, same file, for comparison
            try:
                result["simt_prefill_tok_s"] = prompt_tokens / _median_prefill_s(gm, prefill, kv, pool, repeat)
                result["simt_prefill_breakdown_us"], _ = kernel_breakdown(gm, kv, prompt_tokens, graph=False)
            finally:
                forward_mod.SIMT_TILES = False
        forward_mod.LEGACY_TILES = True                  # the pre-run-2 tiles, same file, for comparison
        try:
            result["legacy_prefill_tok_s"] = prompt_tokens / _median_prefill_s(gm, prefill, kv, pool, repeat)
        finally:
            forward_mod.LEGACY_TILES = False
        compare_with_llama_cpp(result, path, prompt_tokens, 0)   # llama.cpp's tg64 starts at depth 0; ours after the prompt
        pool.close()
        kv.free()
        gm.close()
    finally:
        if own:
            backend.close()
    return result


# Prompts longer than this are benchmarked as the engine runs them: prefill in PREFILL_CHUNK-token steps,
# then decode at that depth. Prefill beyond the limit is not run: LONG_PREFILL_MAX with the tiled prefill
# attention (halo_attention_tc), UNTILED_PREFILL_MAX with halo_attention (a 16k prompt takes minutes there);
# decode then runs at that depth over a zero-filled cache, which reads exactly the same bytes.
# Prefills up to COMPARE_PREFILL_MAX also run with the untiled kernel, for the before/after figure.
LONG_PROMPT, LONG_PREFILL_MAX, UNTILED_PREFILL_MAX, COMPARE_PREFILL_MAX = 512, 16384, 8192, 4096
PREFILL_CHUNK = device_prefill_chunk("gpu")      # the Engine's step on a GPU


def run_long_bench(model_path, backend_name: str, prompt_tokens: int, decode_tokens: int, backend=None,
                   kv_type: str = DEFAULT_KV_CACHE_TYPE) -> dict:
    """Prefill of `prompt_tokens` (chunked) and decode at that depth, split-KV attention on and off, over a KV
    cache of `kv_type`."""
    path = Path(model_path)
    own = backend is None
    backend = backend or registry.create(backend_name)
    result: dict = {"model": path.name, "backend": backend.name, "prompt_tokens": prompt_tokens}
    try:
        free0 = backend.memory_info().free
        n_blocks = -(-(prompt_tokens + decode_tokens + 32) // BLOCK_SIZE)
        gm = GpuModel.load(path, backend, max_tokens=PREFILL_CHUNK, max_seqs=4, kv_blocks=n_blocks, kv_type=kv_type)
        kv = gm.new_kv_cache(n_blocks, BLOCK_SIZE)
        pool = ReadbackPool(backend, slots=3)
        result["device_mb"] = (free0 - backend.memory_info().free) / 2**20
        result["kv_mb"] = kv.nbytes / 2**20
        result["kv_type"] = kv.kv_type
        result["kv_tokens"] = n_blocks * BLOCK_SIZE
        c = gm.config
        prompt = bench_prompt(c.vocab_size, prompt_tokens)
        tiled = gm.fwd.flash or gm.fwd.ts
        result["prefill_attention"] = ("tiled (halo_attention_tc)" if gm.fwd.flash else
                                       f"tiled, SIMT (halo_attention_ts from {gm.fwd.ts_min_context} keys)" if gm.fwd.ts
                                       else "untiled (halo_attention)")
        if prompt_tokens <= (LONG_PREFILL_MAX if tiled else UNTILED_PREFILL_MAX):
            gm.step(_step(prompt[:PREFILL_CHUNK], 0, n_blocks, BLOCK_SIZE), kv, pool, feed_next=True).get_output()
            wall = _chunked_prefill_s(gm, prompt, kv, pool, n_blocks)
            result["prefill_tok_s"], result["ttft_ms"] = prompt_tokens / wall, wall * 1e3
            # the last chunk again (its metadata is the last uploaded): where a prefill step at depth goes
            result["prefill_breakdown_us"], _ = kernel_breakdown(gm, kv, min(PREFILL_CHUNK, prompt_tokens), graph=False)
            if tiled and prompt_tokens <= COMPARE_PREFILL_MAX:
                # the same prompt untiled, and with the SIMT tile where the tensor-core one ran
                own = gm.fwd.flash, gm.fwd.ts
                try:
                    gm.fwd.flash, gm.fwd.ts = False, False
                    result["untiled_prefill_tok_s"] = prompt_tokens / _chunked_prefill_s(gm, prompt, kv, pool, n_blocks)
                    if own[0] and forward_mod.ts_usable(c):
                        gm.fwd.ts = True
                        result["simt_tiled_prefill_tok_s"] = prompt_tokens / _chunked_prefill_s(gm, prompt, kv, pool,
                                                                                                n_blocks)
                finally:
                    gm.fwd.flash, gm.fwd.ts = own
        for split in (True, False):
            gm.fwd.split_kv = split and forward_mod.split_kv_usable(c)
            gm.drop_graphs()
            key = "decode_tok_s" if split else "decode_tok_s_no_split_kv"
            result[key] = _decode(gm, kv, pool, prompt, n_blocks, BLOCK_SIZE, decode_tokens, 2)["decode_tok_s"]
            if split:
                result["breakdown_us"], result["breakdown_how"] = kernel_breakdown(gm, kv, 1)
        result["split_kv_chunks"] = forward_mod.SKV_CHUNKS
        compare_with_llama_cpp(result, path, prompt_tokens, prompt_tokens)
        pool.close()
        kv.free()
        gm.close()
    finally:
        if own:
            backend.close()
    return result


def _chunked_prefill_s(gm: GpuModel, prompt: list[int], kv, pool, n_blocks: int) -> float:
    """Seconds to prefill `prompt` in PREFILL_CHUNK-token steps, each up to its sampled id on the host."""
    a = time.perf_counter()
    for s in range(0, len(prompt), PREFILL_CHUNK):
        gm.step(_step(prompt[s:s + PREFILL_CHUNK], s, n_blocks, BLOCK_SIZE), kv, pool, feed_next=True).get_output()
    return time.perf_counter() - a


def _breakdown_line(what: str, parts_us: dict[str, float]) -> str:
    total = sum(parts_us.values())
    parts = ", ".join(f"{k} {v:.0f} us ({100 * v / total:.0f}%)" for k, v in sorted(parts_us.items(), key=lambda kv: -kv[1]))
    return f"  {what} on the GPU: {total:.0f} us = {parts}"


def format_long_result(r: dict) -> str:
    N = r["prompt_tokens"]
    prefill = (f"prefill {r['prefill_tok_s']:.0f} tok/s ({N} tokens in {PREFILL_CHUNK}-token steps, "
               f"TTFT {r['ttft_ms']:.0f} ms, {r['prefill_attention']} attention)" if "prefill_tok_s" in r else
               f"prefill not run ({N} tokens: too long for {r['prefill_attention']} attention)")
    if "untiled_prefill_tok_s" in r:
        prefill += f"; with the untiled attention {r['untiled_prefill_tok_s']:.0f} tok/s"
    if "simt_tiled_prefill_tok_s" in r:
        prefill += f", with the SIMT tile (HIP's) {r['simt_tiled_prefill_tok_s']:.0f} tok/s"
    lines = [f"{r['model']} on {r['backend']}, depth {N}, KV cache {r['kv_type']}:",
             f"  device memory used {r['device_mb']:.0f} MiB (KV cache {r['kv_mb']:.0f} MiB of {r['kv_type']} for "
             f"{r['kv_tokens']} tokens)",
             f"  {prefill}",
             f"  decode at depth {N}: {r['decode_tok_s']:.0f} tok/s split-KV attention "
             f"({r['split_kv_chunks']} chunks), {r['decode_tok_s_no_split_kv']:.0f} tok/s without"]
    if line := _llama_cpp_line(r, N, N):
        lines.append(line)
    if r.get("prefill_breakdown_us"):
        lines.append(_breakdown_line(f"the last {PREFILL_CHUNK}-token prefill step", r["prefill_breakdown_us"]))
    if r.get("breakdown_us"):
        lines.append(_breakdown_line(f"one decode step at depth {N}", r["breakdown_us"]) + f" [{r.get('breakdown_how')}]")
    return "\n".join(lines)


# The batched-decode bench: T sequences decoding together, each at this depth (a 128-token prompt + 64 tokens).
BATCH_DEPTH = 192


def _batch_step(T: int, depth: int, blocks_per_seq: int) -> StepInput:
    """One decode token for each of T sequences at position depth - 1; sequence s owns blocks s * bps .. + bps."""
    tables = np.arange(T * blocks_per_seq, dtype=np.int32).reshape(T, blocks_per_seq)
    p = depth - 1
    slots = (tables[:, p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE).astype(np.int64)
    return StepInput(token_ids=np.zeros(T, np.int32), positions=np.full(T, p, np.int32), slot_mapping=slots,
                     query_start_loc=np.arange(T + 1, dtype=np.int32), seq_lens=np.full(T, depth, np.int32),
                     block_tables=tables)


def _steps_ms(gm: GpuModel, step: StepInput, kv, pool, n: int) -> float:
    """Milliseconds per step over n replays of `step` (ids fed on the device, two steps in flight), after one
    untimed step that captures its graph."""
    gm.step(step, kv, pool, ids_on_device=True, feed_next=True).get_output()
    pending = []
    a = time.perf_counter()
    for _ in range(n):
        pending.append(gm.step(step, kv, pool, ids_on_device=True, feed_next=True))
        if len(pending) == 2:
            pending.pop(0).get_output()
    for o in pending:
        o.get_output()
    return (time.perf_counter() - a) / n * 1e3


def run_batch_bench(model_path, backend_name: str, batches=(1, 4, 8, 16), depth: int = BATCH_DEPTH, steps: int = 32,
                    backend=None, kv_type: str = DEFAULT_KV_CACHE_TYPE) -> dict:
    """Decode steps of T sequences (one token each), replayed as the engine replays them (one graph per T): ms per
    step (2..16 tokens where tensor cores exist: with the tensor-core kernels tn_tN and without, i.e. bq_t16 /
    r1_t4 / r4_t8 as HIP runs them), and where a step goes on the GPU (kernel roles; the LM head on one row)."""
    path = Path(model_path)
    own = backend is None
    backend = backend or registry.create(backend_name)
    result: dict = {"model": path.name, "backend": backend.name, "depth": depth, "rows": {}}
    before = forward_mod.TN_MIN_T
    try:
        bps = -(-depth // BLOCK_SIZE) + 1
        n_blocks = max(batches) * bps
        gm = GpuModel.load(path, backend, max_tokens=max(batches), max_seqs=max(batches), kv_blocks=n_blocks,
                           kv_type=kv_type)
        kv = gm.new_kv_cache(n_blocks, BLOCK_SIZE)
        result["kv_type"] = kv.kv_type
        pool = ReadbackPool(backend, slots=3)
        for T in batches:
            st = _batch_step(T, depth, bps)
            row = {}
            for tn in ((True, False) if T >= 2 and gm.fwd.use_tc else (True,)):
                forward_mod.TN_MIN_T = before if tn else forward_mod.TN_TOKENS[-1] + 1
                gm.drop_graphs()
                row["ms" if tn else "ms_without_tn"] = _steps_ms(gm, st, kv, pool, steps)
            forward_mod.TN_MIN_T = before
            gm.drop_graphs()
            gm.step(st, kv, pool).get_output()              # this step's metadata is the last uploaded
            row["breakdown_us"], row["how"] = kernel_breakdown(gm, kv, T)
            result["rows"][T] = row
        pool.close()
        kv.free()
        gm.close()
    finally:
        forward_mod.TN_MIN_T = before
        if own:
            backend.close()
    return result


def format_batch_result(r: dict) -> str:
    lines = [f"{r['model']} on {r['backend']}, KV cache {r['kv_type']}: decode steps of T sequences at depth "
             f"{r['depth']} (graph replays)"]
    for T, row in r["rows"].items():
        line = f"  T={T}: {row['ms']:.2f} ms/step = {T / row['ms'] * 1e3:.0f} tok/s"
        if "ms_without_tn" in row:
            line += f" (without tn_tN: {row['ms_without_tn']:.2f} ms = {T / row['ms_without_tn'] * 1e3:.0f} tok/s)"
        lines.append(line)
        if row.get("breakdown_us"):
            lines.append("  " + _breakdown_line(f"T={T} step", row["breakdown_us"]))
    return "\n".join(lines)


def _median_prefill_s(gm: GpuModel, prefill: StepInput, kv, pool, repeat: int) -> float:
    """Median seconds of one prefill step up to its ids on the host, after one untimed run (which touches
    every kernel and buffer once; warm_up already compiled them)."""
    gm.step(prefill, kv, pool, feed_next=True).get_output()
    times = []
    for _ in range(repeat):
        a = time.perf_counter()
        gm.step(prefill, kv, pool, feed_next=True).get_output()
        times.append(time.perf_counter() - a)
    return statistics.median(times)


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
    if "prompt_tokens" in r:
        return format_long_result(r)
    lines = [f"{r['model']} on {r['backend']}, KV cache {r['kv_type']}:",
             f"  load {r['load_s']:.2f} s (open {r.get('open_s', float('nan')):.3f} s, then weights stream), "
             f"device memory used {r['device_mb']:.0f} MiB (weights {r['weights_mb']:.0f} MiB)",
             f"  prefill {r['prefill_tok_s']:.0f} tok/s ({r.get('prefill_tokens', 128)} tokens), TTFT {r['ttft_ms']:.2f} ms",
             f"  decode {r['decode_tok_s']:.0f} tok/s ({r['decode_ms_per_token']:.3f} ms/token, graph), "
             f"eager {r['eager_decode_tok_s']:.0f} tok/s",
             f"  launches per token {r['launches_per_token']}, Python share of decode {100 * r['python_share']:.1f}% "
             f"(eager {100 * r['eager_python_share']:.1f}%)",
             f"  weights {r['weight_bytes_per_token_mb']:.0f} MiB/token -> {r['weight_gb_s']:.0f} GB/s effective; "
             f"D2D copy {r['d2d_copy_gb_s']:.0f} GB/s"]
    if line := _llama_cpp_line(r, r.get("prefill_tokens", 128), 0):
        lines.append(line)
    if "prefill_tile" in r:
        lines.append(f"  prefill tile: {r['prefill_tile']}")
    if r.get("prefill_tok_s_by_split_target"):
        sweep = ", ".join(f"{k}: {v:.0f}" for k, v in r["prefill_tok_s_by_split_target"].items())
        lines.append(f"  prefill tok/s by split-K target blocks (default {forward_mod.SPLIT_TARGET_BLOCKS}): {sweep}")
    if "first_tc_prefill_tok_s" in r:
        lines.append(f"  prefill with the first tensor-core tile (tc everywhere): {r['first_tc_prefill_tok_s']:.0f} "
                     "tok/s")
    if "simt_prefill_tok_s" in r:
        lines.append(f"  prefill with the SIMT gt tile (what HIP runs): {r['simt_prefill_tok_s']:.0f} tok/s")
    if "legacy_prefill_tok_s" in r:
        lines.append(f"  prefill with the legacy r4_t8 tile: {r['legacy_prefill_tok_s']:.0f} tok/s")
    n = r.get("prefill_tokens", 128)             # the breakdowns time the bench's own prompt, whatever its length
    for key, what in (("breakdown_us", "one decode step"), ("prefill_breakdown_us", f"{n}-token prefill"),
                      ("simt_prefill_breakdown_us", f"{n}-token prefill, SIMT tile")):
        if r.get(key):
            total = sum(r[key].values())
            parts = ", ".join(f"{k} {v:.0f} us ({100 * v / total:.0f}%)" for k, v in
                              sorted(r[key].items(), key=lambda kv: -kv[1]))
            lines.append(f"  {what} on the GPU: {total:.0f} us = {parts} [{r.get('breakdown_how')}]")
    if not r.get("breakdown_us") and r.get("breakdown_how"):
        lines.append(f"  no decode breakdown: {r['breakdown_how']}")
    return "\n".join(lines)
