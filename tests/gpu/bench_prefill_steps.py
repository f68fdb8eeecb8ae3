"""Prefill steps on the shape-alike 4B models as the engine runs them: the quick before/after of a kernel change.

    python tests/gpu/bench_prefill_steps.py [BACKEND] [--long] [--models=a,b] [--kv=f32|f16]
Per model (default the Qwen3-4B and Qwen3.5-4B shapes, from HALO_SHAPE_ALIKE_DIR, built when missing as
bench_gpu_forward.py builds them): prefill tok/s of one 128- and one 512-token step (median of 9, each up to its
sampled id on the host) on the KV cache of --kv (default the engine's), then where one 512-token step goes by kernel
name (eager behind copies). --long: the first model's 4,096- and 16,384-token prompts on the f16 and float32 caches
(only --kv's when given), in 512-token steps, each with its last step by kernel. To compare two versions of a kernel
file in one device call, run this from two copies of the tree, alternating (docs/results/h200-run-17.md did so with
the same measurements).
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.backends import registry  # noqa: E402
from engine.backends.async_output import ReadbackPool  # noqa: E402
from engine.gpu.bench import (  # noqa: E402
    PREFILL_CHUNK,
    _chunked_prefill_s,
    _median_prefill_s,
    _step,
    bench_prompt,
    kernel_breakdown,
)
from engine.gpu.model import GpuModel  # noqa: E402
from engine.model.arch import BLOCK_SIZE, DEFAULT_KV_CACHE_TYPE  # noqa: E402

MODELS = ["qwen3-4b-shaped-q4_k", "qwen35-4b-shaped-q4_k_m"]
LONG = (("f16", (4096, 16384)), ("f32", (4096, 16384)))
STEP = PREFILL_CHUNK                         # the long-prompt benchmarks' step (_chunked_prefill_s walks in it)


def by_kernel_line(gm: GpuModel, kv, T: int) -> str:
    parts, how = kernel_breakdown(gm, kv, T, graph=False, by_kernel=True)
    if parts is None:
        return f"  by kernel: {how}"
    top = sorted(parts.items(), key=lambda kv: -kv[1])
    return f"  {T}-token step by kernel, {sum(parts.values()):.0f} us: " + ", ".join(f"{k} {us:.0f}" for k, us in top)


@contextmanager
def loaded(path: Path, backend_name: str, blocks: int, kv_type: str):
    """(model, KV cache of `blocks` blocks of kv_type, readback pool) on a fresh backend, all closed on the way out."""
    backend = registry.create(backend_name)
    try:
        gm = GpuModel.load(path, backend, max_tokens=STEP, max_seqs=4, kv_blocks=blocks, kv_type=kv_type)
        kv, pool = gm.new_kv_cache(blocks, BLOCK_SIZE), ReadbackPool(backend, slots=3)
        try:
            yield gm, kv, pool
        finally:
            pool.close()
            kv.free()
            gm.close()
    finally:
        backend.close()


def short_prompts(path: Path, backend_name: str, kv_type: str) -> list[str]:
    t0 = time.perf_counter()
    blocks = -(-(STEP + 64) // BLOCK_SIZE)
    with loaded(path, backend_name, blocks, kv_type) as (gm, kv, pool):
        rates = []
        for T in (128, STEP):
            s = _median_prefill_s(gm, _step(bench_prompt(gm.config.vocab_size, T), 0, blocks, BLOCK_SIZE), kv, pool, 9)
            rates.append(f"pp{T} {T / s:.0f} tok/s ({s * 1e3:.2f} ms)")
        return [f"{path.name}, {kv_type} cache: load {time.perf_counter() - t0:.1f} s, " + ", ".join(rates),
                by_kernel_line(gm, kv, STEP)]             # the last step run was the STEP-token one


def long_prompts(path: Path, backend_name: str, kv_types: tuple[str, ...]) -> list[str]:
    lines = []
    for kv_type, lengths in LONG:
        if kv_type not in kv_types:
            continue
        blocks = -(-(max(lengths) + 64) // BLOCK_SIZE)
        with loaded(path, backend_name, blocks, kv_type) as (gm, kv, pool):
            for n in lengths:
                prompt = bench_prompt(gm.config.vocab_size, n)
                gm.step(_step(prompt[:STEP], 0, blocks, BLOCK_SIZE), kv, pool, feed_next=True).get_output()
                wall = min(_chunked_prefill_s(gm, prompt, kv, pool, blocks) for _ in range(2 if n <= 4096 else 1))
                lines += [f"{path.name}, {kv_type} cache, {n}-token prompt: {n / wall:.0f} tok/s "
                          f"(TTFT {wall * 1e3:.0f} ms)", by_kernel_line(gm, kv, STEP)]
    return lines


def main() -> int:
    from tests.gpu.bench_gpu_forward import ensure_models
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    backend_name = args[0] if args else "cuda-python"
    kv_arg = next((a.split("=", 1)[1] for a in sys.argv if a.startswith("--kv=")), None)
    kv_type = kv_arg or DEFAULT_KV_CACHE_TYPE
    names = next((a.split("=", 1)[1].split(",") for a in sys.argv if a.startswith("--models=")), MODELS)
    out_dir = Path(os.environ.get("HALO_SHAPE_ALIKE_DIR", "/tmp/shape-alike"))
    chosen = ensure_models(out_dir, Path(os.environ.get("HALO_SKELETON_DIR", ROOT / ".device-carry")), names)
    for path in chosen:
        print("\n".join(short_prompts(path, backend_name, kv_type)), flush=True)
    if "--long" in sys.argv and chosen:
        print("\n".join(long_prompts(chosen[0], backend_name, (kv_arg,) if kv_arg else tuple(t for t, _ in LONG))),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
