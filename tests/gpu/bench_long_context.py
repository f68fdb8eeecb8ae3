"""Long context and batched decode on the Qwen3-4B shape-alike (issue figures: llama.cpp on the same H200).

    python tests/gpu/bench_long_context.py [BACKEND]
Needs HALO_SHAPE_ALIKE_DIR/qwen3-4b-shaped-q4_k.gguf (tests/gpu/device_call.sh builds it from the staged
skeleton). Prints, per depth, prefill (chunked as the engine runs it) and decode at that depth with split-KV
attention on and off, over a float32 KV cache and (F16_DEPTHS) an f16 one; decode steps of 1/4/8/16 sequences
(with and without the tensor-core batched kernels tn_tN where tensor cores exist) and where such a step goes; one request through the Engine with async
scheduling off; aggregate decode through the Engine (async on) at 1/4/8/16 concurrent requests.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.bench import format_engine_result, run_engine_bench  # noqa: E402
from engine.gpu.bench import format_batch_result, format_long_result, run_batch_bench, run_long_bench  # noqa: E402

MODEL = "qwen3-4b-shaped-q4_k.gguf"
DEPTHS = (4096, 16384, 32768)
F16_DEPTHS = (4096, 16384, 32768)            # the same with kv_type="f16" (half the cache, llama.cpp's default type)
CONCURRENCY = (1, 4, 8, 16)


def main() -> int:
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda-python"
    path = Path(os.environ.get("HALO_SHAPE_ALIKE_DIR", "/tmp/sa")) / MODEL
    if not path.exists():
        print(f"skip: no {path}")
        return 0
    for depth in DEPTHS:
        print(format_long_result(run_long_bench(path, backend, depth, 64)), flush=True)
    for depth in F16_DEPTHS:
        print(format_long_result(run_long_bench(path, backend, depth, 64, kv_type="f16")), flush=True)
    print(format_batch_result(run_batch_bench(path, backend)), flush=True)
    print(format_engine_result(run_engine_bench(path, False, 1, 128, 64, backend)), flush=True)   # async off
    for n in CONCURRENCY:
        print(format_engine_result(run_engine_bench(path, True, n, 128, 64, backend)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
