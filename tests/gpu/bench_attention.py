"""Decode attention on its own: split-KV (halo_attention_split_* + halo_attention_merge) over every attention
layer of a model's shapes at a given depth, float32 and f16 caches, microseconds per decode step (graph replays)
and the cache bytes read per second; the same with the merge fused into the split kernel (HALO_SKV_FUSED=1). Much cheaper than the whole-model long-context benchmark (no GGUF to build).

    python tests/gpu/bench_attention.py [BACKEND] [--kernels=NAME,...] [--chunks=64,128] [--shapes=qwen3-4b,...]
                                        [--depths=4096,...]
--kernels: extra kernel builds of halo_layer.cu to time next to the forward's own choice and the SIMT build (same
arguments; an extra build gets the SIMT build's shared memory).
--shapes / --depths: a part of SHAPES / DEPTHS (a 16-token step at depth 192 always runs for each shape).
Caches are zero-filled (the scores' values do not change the work); block tables are in order.
"""
from __future__ import annotations

import functools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.backends import registry  # noqa: E402
from engine.backends.base import NULL_POINTER  # noqa: E402
from engine.gpu.forward import (  # noqa: E402
    SKV_WARPS,
    merge_threads,
    skv_chunks,
    split_kernel,
    split_shared_bytes,
    tensor_cores_usable,
    view,
)

BS = 16
# (name, heads, kv heads, head dim, attention layers)
SHAPES = (("qwen3-4b", 32, 8, 128, 36), ("gemma-3-270m", 4, 1, 256, 18), ("qwen35-4b", 16, 4, 256, 8),
          ("smollm2-135m", 9, 3, 64, 30))
DEPTHS = (192, 4096, 16384)
REPEAT = 10


def _arg(name: str, default: str) -> list[str]:
    for a in sys.argv[1:]:
        if a.startswith(f"--{name}="):
            return [x for x in a.split("=", 1)[1].split(",") if x]
    return [x for x in default.split(",") if x]


def time_graph(backend, stream, body) -> float:
    """Microseconds per replay of `body`'s launches captured as one graph (as the forward replays a decode step:
    timed eagerly, Python's ~20 us per launch would hide every kernel shorter than that)."""
    rt = backend.rt
    body()                                                  # loads the kernels outside the capture
    backend.begin_capture(stream)
    try:
        body()
    finally:
        graph = backend.end_capture(stream)
    exe = rt.graph_instantiate(graph)
    try:
        rt.graph_launch(exe, stream.handle)
        e0, e1 = backend.create_event(timing=True), backend.create_event(timing=True)
        backend.record_event(e0, stream)
        for _ in range(REPEAT):
            rt.graph_launch(exe, stream.handle)
        backend.record_event(e1, stream)
        backend.synchronize()
        return backend.elapsed_ms(e0, e1) * 1e3 / REPEAT
    finally:
        rt.graph_exec_destroy(exe)
        rt.graph_destroy(graph)


class Launches:
    """One decode step's attention launches, every layer: the split kernel alone, or with the merge after each."""

    def __init__(self, backend, stream, kern, grid, shared: int, layer_args, merge_grid, merge_args):
        self.backend, self.stream, self.kern, self.grid, self.shared = backend, stream, kern, grid, shared
        self.layer_args, self.merge_grid, self.merge_args = layer_args, merge_grid, merge_args
        self.merge = backend.kernel("halo_layer.cu", "halo_attention_merge")
        self.merge_threads = merge_threads(int(merge_args[3]), int(merge_args[1]))   # (part, nc, H, D, ...)

    def split(self, with_merge: bool = False) -> None:
        for args in self.layer_args:
            self.backend.launch(self.kern, self.grid, 32 * SKV_WARPS, args, self.stream, self.shared)
            if with_merge:
                self.backend.launch(self.merge, self.merge_grid, self.merge_threads, self.merge_args, self.stream)

    def split_and_merge(self) -> None:
        self.split(True)

    def fused(self, counters) -> None:
        """The split kernel with `counters`: the last block of each (token, kv head) merges (HALO_SKV_FUSED=1)."""
        for args in self.layer_args:
            self.backend.launch(self.kern, self.grid, 32 * SKV_WARPS, args[:15] + (counters,) + args[16:],
                                self.stream, self.shared)


def bench_shape(backend, stream, shape, depth: int, T: int, kernels: list[str], chunks: list[int]) -> None:
    name, H, Hkv, D, layers = shape
    blocks = -(-(depth + T) // BS)
    ld = (H + 2 * Hkv) * D
    G = H // Hkv
    qkv = backend.alloc((T, ld), np.float32)
    backend.memset_async(qkv, 0, stream)
    pos = np.arange(depth, depth + T, dtype=np.int32) if T > 1 else np.array([depth], np.int32)
    meta = [np.ascontiguousarray(a) for a in (pos, np.zeros(T, np.int32), np.arange(blocks, dtype=np.int32))]
    dev = []
    for a in meta:
        b = backend.alloc(a.shape, a.dtype)
        backend.copy_h2d_async(b, a, stream)
        dev.append(b)
    pos_d, seq_d, tab_d = dev
    out = backend.alloc((T, H * D), np.float32)
    counters = backend.alloc((T * Hkv,), np.int32)              # the fused merge's; it leaves them at 0
    backend.memset_async(counters, 0, stream)
    dev.append(counters)
    for f16 in (False, True):
        per_layer = blocks * BS * Hkv * D
        dtype = np.float16 if f16 else np.float32
        caches = backend.alloc((2 * layers * per_layer,), dtype)
        backend.memset_async(caches, 0, stream)
        item = np.dtype(dtype).itemsize
        tc = tensor_cores_usable(backend)
        own, simt = split_kernel(D, G, f16, tc)[0], split_kernel(D, G, f16)[0]
        shared = {own: split_shared_bytes(D, G, f16, tc), simt: split_shared_bytes(D, G, f16)}
        width = simt.split("_d")[1].split("_")[0]
        extra = [k for k in kernels if k.endswith("_f16") == f16 and f"_d{width}_" in k]
        names = list(dict.fromkeys([own, simt] + extra))       # the forward's choice first, then the SIMT build
        for nc in chunks or [skv_chunks(T)]:
            part = backend.alloc((T * H * nc * (D + 2),), np.float32)
            for kname in names:
                try:
                    kern = backend.kernel("halo_layer.cu", kname)
                except Exception as e:                          # noqa: BLE001 - a build absent on this arch
                    print(f"  {kname}: {type(e).__name__}: {e}")
                    continue
                layer_args = [(qkv, np.int32(ld), view(caches, 2 * i * per_layer, per_layer),
                               view(caches, (2 * i + 1) * per_layer, per_layer), pos_d, seq_d, tab_d,
                               np.int32(blocks), np.int32(BS), np.int32(H), np.int32(Hkv), np.int32(D),
                               np.float32(1.0), np.int32(0), part, NULL_POINTER, NULL_POINTER, out)
                              for i in range(layers)]
                launch = Launches(backend, stream, kern, (T, Hkv, nc), shared.get(kname, shared[simt]), layer_args,
                                  (T, H), (part, np.int32(nc), np.int32(H), np.int32(D), NULL_POINTER, out))
                split_us = time_graph(backend, stream, launch.split)
                us = time_graph(backend, stream, launch.split_and_merge)
                fused_us = time_graph(backend, stream, functools.partial(launch.fused, counters))
                read = 2 * layers * (depth + T) * Hkv * D * item * T
                print(f"  {name:13s} depth {depth:6d} T {T:2d} {'f16' if f16 else 'f32'} nc {nc:3d} {kname:36s} "
                      f"{us:8.1f} us/step (split {split_us:8.1f}, fused merge {fused_us:8.1f})  "
                      f"{read / split_us / 1e3:7.1f} GB/s in split", flush=True)
            backend.free(part)
        backend.free(caches)
    for b in dev + [qkv, out]:
        backend.free(b)


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    backend = registry.create(args[0] if args else "cuda-python")
    stream = backend.create_stream()
    kernels, chunks = _arg("kernels", ""), [int(c) for c in _arg("chunks", "")]
    shapes = _arg("shapes", ",".join(s[0] for s in SHAPES))
    depths = [int(d) for d in _arg("depths", ",".join(map(str, DEPTHS)))]
    for shape in SHAPES:
        if shape[0] not in shapes:
            continue
        for depth in depths:
            bench_shape(backend, stream, shape, depth, 1, kernels, chunks)
        bench_shape(backend, stream, shape, 192, 16, kernels, [])
    backend.destroy_stream(stream)
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
