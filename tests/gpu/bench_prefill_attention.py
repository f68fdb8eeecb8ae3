"""The tiled prefill attention on its own: one GPU prefill step (engine.core.setup's GPU step, 2,048 tokens) of
halo_attention_tc over a sequence's keys at several depths, float32 and f16 caches, and the float32 cache's split
path the forward takes (halo_kv_split, then halo_attention_tc_split: "f32 split", both kernels timed), launched as
the forward launches them (engine.gpu.forward.fa_block_rows picks the block). Prints microseconds per layer,
milliseconds per step (x the shape's layers) and the products' rate (TFLOP/s of Q K^T and P V over the keys each
query sees). Much cheaper than the whole-model long-context benchmark (no GGUF to build), and the place to compare kernel changes:
the whole-model figure follows from these times (NOTES.md's per-kernel tables).

    python tests/gpu/bench_prefill_attention.py [BACKEND] [--depths=0,2048,6144,14336] [--shapes=qwen3-4b,...]
--depths: keys already in the cache before the step (the step's last key is depth + T - 1): 0, 2,048, 6,144 and
14,336 are the last steps of 2k, 4k, 8k and 16k prompts.
Caches and queries are random normal values (block tables in order); the work does not depend on them.
"""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.backends import registry  # noqa: E402
from engine.backends.base import NULL_POINTER  # noqa: E402
from engine.backends.gpu import device_attribute  # noqa: E402
from engine.core.setup import DEFAULT_PREFILL_CHUNK  # noqa: E402
from engine.gpu.forward import (  # noqa: E402
    FA_KEYS,
    FA_SPLIT_SHARED_BYTES,
    KV_SPLIT_SCALE_KEYS,
    fa_block_rows,
    flash_usable,
    kv_suffix,
    tensor_cores_usable,
)
from tests.gpu.bench_attention import _arg  # noqa: E402  (the decode attention bench's --name=a,b options)
from tests.gpu.device_arrays import upload  # noqa: E402

BS = 16
# (name, heads, kv heads, head dim, attention layers): the shapes whose heads the tensor-core tile takes
SHAPES = (("qwen3-4b", 32, 8, 128, 36), ("smollm2-135m", 9, 3, 64, 30))
DEPTHS = (0, 2048, 6144, 14336)
REPEAT = 5


def product_flops(T: int, depth: int, H: int, D: int) -> float:
    """Q K^T and P V over the keys each of the step's T queries sees (causal: query t sees depth + t + 1)."""
    keys = T * depth + T * (T + 1) / 2
    return 4.0 * keys * H * D


def bench_step(backend, stream, shape, depth: int, T: int, mode: str, rng) -> None:
    """mode: "f32" (halo_attention_tc), "f32 split" (halo_kv_split + halo_attention_tc_split) or "f16"."""
    name, H, Hkv, D, layers = shape
    G, keys, f16 = H // Hkv, depth + T, mode == "f16"
    blocks = -(-keys // BS)
    ld = (H + 2 * Hkv) * D
    dtype = np.float16 if f16 else np.float32
    host = [rng.normal(size=(T, ld)).astype(np.float32),
            rng.normal(size=(blocks * BS, Hkv, D)).astype(dtype), rng.normal(size=(blocks * BS, Hkv, D)).astype(dtype),
            np.arange(depth, keys, dtype=np.int32), np.zeros(T, np.int32), np.arange(blocks, dtype=np.int32)]
    bufs = [upload(backend, stream, a) for a in host]
    qkv, kc, vc, pos, seq, tab = bufs
    out = backend.alloc((T, H * D), np.float32)
    rows = fa_block_rows(T, G, Hkv, device_attribute(backend, "multiprocessor_count"))
    grid = (-(-T // (rows // G)), Hkv)
    meta = (pos, seq, tab, np.int32(blocks), np.int32(BS), np.int32(H), np.int32(Hkv), np.int32(D),
            np.float32(1.0 / np.sqrt(D)), np.int32(0), np.int32(T), NULL_POINTER, out)
    if mode == "f32 split":                          # GpuKVCache's split copy of this layer, as the forward sizes it
        slots = blocks * BS
        ks, vs = (backend.alloc((2 * slots * Hkv * D,), np.uint16) for _ in range(2))
        scales = backend.alloc((slots // KV_SPLIT_SCALE_KEYS * Hkv * 4,), np.float32)
        lens = upload(backend, stream, np.array([keys], np.int32))
        bufs += [ks, vs, scales, lens]
        launches = [(backend.kernel("halo_layer.cu", "halo_kv_split"), (-(-keys // FA_KEYS), 1, Hkv), 128,
                     (kc, vc, lens, tab, np.int32(blocks), np.int32(BS), np.int32(Hkv), np.int32(D), ks, vs, scales),
                     0),
                    (backend.kernel("halo_layer.cu", "halo_attention_tc_split"), grid, 2 * rows,
                     (qkv, np.int32(ld), ks, vs) + meta + (scales,), FA_SPLIT_SHARED_BYTES)]
    else:
        launches = [(backend.kernel("halo_layer.cu", "halo_attention_tc" + kv_suffix(f16)), grid, 2 * rows,
                     (qkv, np.int32(ld), kc, vc) + meta, 0)]

    def step() -> None:
        for kern, g, threads, args, shared in launches:
            backend.launch(kern, g, threads, args, stream, shared)

    try:
        step()                                       # loads the kernels; warms the caches
        e0, e1 = backend.create_event(timing=True), backend.create_event(timing=True)
        backend.record_event(e0, stream)
        for _ in range(REPEAT * layers):
            step()
        backend.record_event(e1, stream)
        backend.synchronize()
        us = backend.elapsed_ms(e0, e1) * 1e3 / (REPEAT * layers)
        rate = product_flops(T, depth, H, D) / us / 1e6
        print(f"  {name:13s} depth {depth:6d} T {T:5d} {mode:9s} rows {rows:3d} "
              f"{us:9.1f} us/layer  {us * layers / 1e3:8.2f} ms/step  {rate:6.1f} TFLOP/s", flush=True)
    finally:
        for b in bufs + [out]:
            backend.free(b)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    backend = registry.create(args[0] if args else "cuda-python")
    if not tensor_cores_usable(backend):
        print("halo_attention_tc needs CUDA tensor cores (sm_80+): nothing to time here")
        backend.close()
        return 0
    stream = backend.create_stream()
    shapes = _arg("shapes", ",".join(s[0] for s in SHAPES))
    depths = [int(d) for d in _arg("depths", ",".join(map(str, DEPTHS)))]
    T = DEFAULT_PREFILL_CHUNK["gpu"]
    rng = np.random.default_rng(0)
    for shape in SHAPES:
        if shape[0] not in shapes or not flash_usable(SimpleNamespace(head_dim=shape[3], n_head=shape[1],
                                                                      n_head_kv=shape[2])):
            continue
        for mode in ("f32", "f32 split", "f16"):
            for depth in depths:
                bench_step(backend, stream, shape, depth, T, mode, rng)
    backend.destroy_stream(stream)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
