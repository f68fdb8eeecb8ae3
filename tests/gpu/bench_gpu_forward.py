"""GPU forward benchmark on the shape-alike models (real sizes and quant types, random weights).

    python tests/gpu/bench_gpu_forward.py [BACKEND]
Builds the files first when HALO_SHAPE_ALIKE_DIR lacks them, from the skeletons in HALO_SKELETON_DIR
(with shape_alike.py beside them; needs the gguf package). Prints each model's figures, then a table; then
the same bench with a 512-token prompt for the models llama.cpp has a pp512 figure for (the issue's second
prefill target), each compared with that figure.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.gpu.bench import format_result, reference_for, run_bench  # noqa: E402

MODELS = ["smollm2-135m-q4_1", "gemma-3-270m-q4_k_m", "qwen3-4b-shaped-q4_k", "qwen35-4b-shaped-q4_k_m",
          "qwen3moe-30b-a3b-shaped-q4_k_m",           # built only when its skeleton is staged (18 GB)
          "gpt-oss-20b-shaped-mxfp4"]                 # ditto (12.1 GB); its skeleton and builder: the tool below
# shape_alike.py has no MXFP4: gpt-oss's skeleton is written and built by this project's own tool
OWN_BUILDER = {"gpt-oss-20b-shaped-mxfp4": ROOT / "tests" / "tools" / "make_gptoss_shape_alike.py"}


def ensure_models(out_dir: Path, skel_dir: Path, names: list[str] = MODELS) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name in names:
        target = out_dir / f"{name}.gguf"
        if not target.exists():
            skel = skel_dir / f"{name}.npz"
            if not skel.exists():
                print(f"skip {name}: no {skel}")
                continue
            builder = OWN_BUILDER.get(name, skel_dir / "shape_alike.py")
            subprocess.run([sys.executable, str(builder), "build", str(skel), str(target)], check=True)
        paths.append(target)
    return paths


def main() -> int:
    backend = sys.argv[1] if len(sys.argv) > 1 else "cuda-python"
    out_dir = Path(os.environ.get("HALO_SHAPE_ALIKE_DIR", "/tmp/shape-alike"))
    skel_dir = Path(os.environ.get("HALO_SKELETON_DIR", ROOT / ".device-carry"))
    results = []
    paths = ensure_models(out_dir, skel_dir)
    for path in paths:
        r = run_bench(path, backend)
        print(format_result(r), flush=True)
        results.append(r)
    long_prompt = 512
    for path in [p for p in paths if reference_for(p, long_prompt, 0)[0]]:
        r = run_bench(path, backend, long_prompt)
        print(format_result(r), flush=True)
        results.append(r)
    print("\n| model | prompt | load s | prefill tok/s (x llama.cpp at that prompt) | TTFT ms | decode tok/s (x llama.cpp) | "
          "eager decode | launches/token | Python share | weight GB/s | D2D GB/s | device MiB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['model']} | {r['prefill_tokens']} | {r['load_s']:.2f} | {r['prefill_tok_s']:.0f} "
              f"({r.get('prefill_vs_llama_cpp', 0):.2f}x) | {r['ttft_ms']:.2f} | {r['decode_tok_s']:.0f} "
              f"({r.get('decode_vs_llama_cpp', 0):.2f}x) | {r['eager_decode_tok_s']:.0f} | {r['launches_per_token']} | "
              f"{100 * r['python_share']:.0f}% | {r['weight_gb_s']:.0f} | {r['d2d_copy_gb_s']:.0f} | {r['device_mb']:.0f} |")
    out = os.environ.get("OUT")
    if out:
        Path(out, "gpu_bench.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
