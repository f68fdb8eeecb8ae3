"""`python -m engine.model.moe_layer_bench`: decode time of ONE Qwen3-30B-A3B-shaped layer on the CPU
path, and the per-token estimate for the whole model (48 such layers + the output head).

The real file is 17.3 GiB; this builds one layer's tensors in memory (random blocks of the published
shapes and Q4_K_M types: attention Q4_K with Q6_K attn_v, 128 experts of gate/up Q4_K and down Q6_K,
the [128, 2048] float32 router) and times the same code the CPU forward pass runs for one token:
engine.model.quant_matrix products for q|k|v and the output projection, engine.model.moe.moe_ffn for
the experts (only the 8 routed experts' bytes are read). Attention over the cache, norms and rope are
left out (small at short context). It is an estimate from one layer, not a run of the real model.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from engine.gguf.types import GGMLType
from engine.model.kernel_bench import random_blocks
from engine.model.moe import ExpertStack, MoeWeights, moe_ffn
from engine.model.quant_matrix import QuantLinear, QuantMatrix, describe_kernels

E, HEADS, KV_HEADS, HEAD_DIM, N_EXPERT, K, F, VOCAB, LAYERS = 2048, 32, 4, 128, 128, 8, 768, 151936, 48
def _quant(t: GGMLType, rows: int, cols: int, rng) -> QuantMatrix:
    return QuantMatrix(random_blocks(t, rows, cols, rng), t, rows, cols)


def _experts(t: GGMLType, rows: int, cols: int, rng) -> ExpertStack:
    raw = random_blocks(t, rows, cols, rng, lead=(N_EXPERT,)).reshape(N_EXPERT, -1)
    raw.flags.writeable = False
    return ExpertStack(raw, t, rows, cols)


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    rng = np.random.default_rng(0)
    qkv = QuantLinear((_quant(GGMLType.Q4_K, HEADS * HEAD_DIM, E, rng), _quant(GGMLType.Q4_K, KV_HEADS * HEAD_DIM, E, rng),
                       _quant(GGMLType.Q6_K, KV_HEADS * HEAD_DIM, E, rng)))
    wo = QuantLinear((_quant(GGMLType.Q4_K, E, HEADS * HEAD_DIM, rng),))
    moe = MoeWeights(router=rng.normal(size=(N_EXPERT, E)).astype(np.float32),
                     gate=_experts(GGMLType.Q4_K, F, E, rng), up=_experts(GGMLType.Q4_K, F, E, rng),
                     down=_experts(GGMLType.Q6_K, E, F, rng))
    output = QuantLinear((_quant(GGMLType.Q6_K, VOCAB, E, rng),))
    h = rng.normal(size=(1, E)).astype(np.float32)
    a = rng.normal(size=(1, HEADS * HEAD_DIM)).astype(np.float32)

    def layer():
        qkv(h)
        wo(a)
        moe_ffn(h, moe, K, "swiglu")

    layer()                                        # first use: compile or read numba's cache
    output(h)
    layer_s = _best(layer, args.repeat)
    moe_s = _best(lambda: moe_ffn(h, moe, K, "swiglu"), args.repeat)
    head_s = _best(lambda: output(h), max(1, args.repeat // 2))
    token_s = LAYERS * layer_s + head_s
    print(f"CPU path: {describe_kernels()}")
    print(f"one layer (q|k|v, output projection, router + {K} of {N_EXPERT} experts): {layer_s * 1e3:.1f} ms "
          f"(experts {moe_s * 1e3:.1f} ms)")
    print(f"output head [{VOCAB}, {E}] Q6_K: {head_s * 1e3:.1f} ms")
    print(f"estimate per token: {LAYERS} x {layer_s * 1e3:.1f} + {head_s * 1e3:.1f} = {token_s:.2f} s "
          f"({1 / token_s:.2f} tok/s), before attention over the cache, norms and rope")


if __name__ == "__main__":
    main()
