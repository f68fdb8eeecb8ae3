"""The tensor-core prefill tiles on their own, on Qwen3-4B's matmul shapes (random Q4_K / Q6_K blocks):
microseconds per call (split-K sum included) of the first tile (tc, HALO_GPU_TILES=tc), the pipelined one (tcp),
the pipelined one with integer K-quant weights (tck) and the same on f16 MMAs (tch, the default for these types, its
activations split once per product by halo_split_f16, that pre-pass included in its time; tch128: its 128-token
build), at 128 and 512 tokens
(the whole-model benchmark sweeps the split-K target).

    python tests/gpu/bench_prefill_tiles.py [BACKEND] [--profile] [--tokens=128,512]
--profile: each product once at each --tokens count on the default kernels, nothing timed (for running under a
profiler). --tokens: the step sizes (default 128 and 512; 9..16 take bq_t16 unless HALO_GPU_BQ=0, 1 takes mv_t1).
Much cheaper than the whole-model benchmark (no GGUF to build): each product is launched through
GpuForward._matmul / _glu exactly as the forward launches it, timed with events around repeated launches.
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import engine.gpu.forward as fwd_mod  # noqa: E402
from engine.backends import registry  # noqa: E402
from engine.gguf.types import GGMLType  # noqa: E402
from engine.gpu.model import GpuModel  # noqa: E402
from engine.gpu.weights import DeviceMatrix  # noqa: E402
from tests.gpu.test_gpu_prefill_tiles import random_matrix  # noqa: E402

TINY = ROOT / "tests" / "golden" / "data" / "tiny-llama-f32.gguf"
N_EMBD, N_FF, Q_DIM, KV_DIM, LAYERS = 2560, 9728, 4096, 1024, 36       # Qwen3-4B
Q4, Q6 = GGMLType.Q4_K, GGMLType.Q6_K
# the forward's own partial-sums capacity for these shapes (splitk_floats at 512 tokens)
PARTIAL_CAP = min(2 * fwd_mod.SPLIT_TARGET_BLOCKS * fwd_mod.TC_ROWS * fwd_mod.TC_TOKENS * 2,
                  8 * 512 * max(Q_DIM + 2 * KV_DIM, N_EMBD, 2 * N_FF))
REPEAT = 20
MODES = fwd_mod.TC_KERNELS                  # tch128: "tch" with TCH_WIDE_MIN_T = 1


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    backend = registry.create(args[0] if args else "cuda-python")
    model = GpuModel.load(TINY, backend, max_tokens=512, max_seqs=4, kv_blocks=4)
    fwd = model.fwd
    if not fwd.use_tc:
        print("no tensor cores here (CUDA sm_80+): nothing to compare")
        return 0
    rng = np.random.default_rng(0)
    bufs = []

    def upload(host: np.ndarray):
        buf = backend.alloc(host.shape, host.dtype)
        backend.copy_h2d_async(buf, np.ascontiguousarray(host), fwd.stream)
        bufs.append(buf)
        return buf

    def matrix(t: GGMLType, rows: int, K: int) -> DeviceMatrix:
        return DeviceMatrix(upload(random_matrix(rng, t, rows, K)), int(t), rows, K)

    qkv = [matrix(Q4, Q_DIM, N_EMBD), matrix(Q4, KV_DIM, N_EMBD), matrix(Q6, KV_DIM, N_EMBD)]
    wo, down = [matrix(Q4, N_EMBD, Q_DIM)], [matrix(Q6, N_EMBD, N_FF)]
    gate, up = matrix(Q4, N_FF, N_EMBD), matrix(Q4, N_FF, N_EMBD)
    X = upload(rng.standard_normal((512, N_FF)).astype(np.float32))    # K <= N_FF columns of it are read
    Y = backend.alloc((512, 2 * N_FF), np.float32)
    bufs.append(Y)
    own = fwd.partial, fwd.partial_cap
    fwd.partial_cap = PARTIAL_CAP
    fwd.partial = backend.alloc(fwd.partial_cap, np.float32)
    bufs.append(fwd.partial)
    fwd.config = dataclasses.replace(fwd.config, n_embd=N_EMBD, n_ff=N_FF, activation="silu")
    products = {  # name -> (launch(T), multiply-adds per token)
        "qkv": (lambda T: fwd._matmul(qkv, X, T, Y, Q_DIM + 2 * KV_DIM), N_EMBD * (Q_DIM + 2 * KV_DIM)),
        "wo": (lambda T: fwd._matmul(wo, X, T, Y, N_EMBD), Q_DIM * N_EMBD),
        "gate/up": (lambda T: fwd._glu(gate, up, X, T, Y), 2 * N_EMBD * N_FF),
        "down": (lambda T: fwd._matmul(down, X, T, Y, N_EMBD), N_FF * N_EMBD),
    }
    e0, e1 = backend.create_event(timing=True), backend.create_event(timing=True)

    def time_us(launch, T: int) -> float:
        for _ in range(3):
            launch(T)
        e0.record(fwd.stream)
        for _ in range(REPEAT):
            launch(T)
        e1.record(fwd.stream)
        e1.synchronize()
        return backend.elapsed_ms(e0, e1) * 1e3 / REPEAT

    def output(launch, T: int, width: int) -> np.ndarray:
        launch(T)
        host = backend.alloc_pinned((T, width), np.float32)
        try:
            backend.copy_d2h_async(host, Y, fwd.stream, nbytes=T * width * 4)
            backend.synchronize()
            return host.array.copy()
        finally:
            backend.free_pinned(host)

    widths = {"qkv": Q_DIM + 2 * KV_DIM, "wo": N_EMBD, "gate/up": N_FF, "down": N_EMBD}
    own_tile, own_wide = fwd_mod.TC_TILE, fwd_mod.TCH_WIDE_MIN_T
    try:
        tokens = next((tuple(int(t) for t in a.split("=", 1)[1].split(",")) for a in sys.argv
                       if a.startswith("--tokens=")), (128, 512))
        if "--profile" in sys.argv:
            for T in tokens:
                for launch, _ in products.values():
                    launch(T)
            return 0
        for T in tokens:
            print(f"\n== {T} tokens: us per call (TFLOP/s of float32-exact work); last column: max |mode - tc| "
                  "/ max |tc| per mode")
            print("| product | " + " | ".join(MODES) + " | " + " | ".join(f"{m} / tc" for m in MODES[1:]) + " | diff |")
            print("|---|" + "---|" * (2 * len(MODES)))
            totals = dict.fromkeys(MODES, 0.0)
            for name, (launch, macs) in products.items():
                us, outs = {}, {}
                for mode in MODES:
                    fwd_mod.TC_TILE = "tch" if mode == "tch128" else mode
                    fwd_mod.TCH_WIDE_MIN_T = 1 if mode == "tch128" else 1 << 30
                    us[mode] = time_us(launch, T)
                    outs[mode] = output(launch, T, widths[name])
                    totals[mode] += us[mode]
                ref = max(float(np.max(np.abs(outs["tc"]))), 1e-30)
                diff = " ".join(f"{float(np.max(np.abs(outs[m] - outs['tc']))) / ref:.1e}" for m in MODES[1:])
                tf = {m: 2 * macs * T / (us[m] * 1e-6) / 1e12 for m in us}
                print(f"| {name} | " + " | ".join(f"{us[m]:.0f} ({tf[m]:.1f})" for m in MODES) + " | " +
                      " | ".join(f"{us[m] / us['tc']:.2f}" for m in MODES[1:]) + f" | {diff} |", flush=True)
            for mode, t in totals.items():
                print(f"{mode}: one layer's matmuls {t:.0f} us -> {LAYERS} layers {LAYERS * t / 1e3:.1f} ms, "
                      f"matmul-only cap {T / (LAYERS * t * 1e-6):.0f} tok/s")
    finally:
        fwd_mod.TC_TILE, fwd_mod.TCH_WIDE_MIN_T = own_tile, own_wide
        backend.synchronize()
        for b in bufs:
            backend.free(b)
        fwd.partial, fwd.partial_cap = own
        model.close()
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
