"""The CPU path beside llama.cpp on this machine, in alternating rounds (the reference figures in
../shared/reference/README.md come from another machine; a ratio is only fair within the same minutes).

    python tests/bench_cpu_vs_llama_cpp.py [MODEL.gguf ...] [--rounds N]
Models default to the two fetched references (`python -m engine fetch --all`). Needs llama-cpp-python, which is
not a dependency: `pip install llama-cpp-python` builds llama.cpp from source (cmake and a C++ compiler, ~5 min on
2 cores). Both engines run on the compiled products' thread count (numba's: the cores, or NUMBA_NUM_THREADS), take
the same text's first 128 tokens as the prompt (each engine's own tokenizer), then decode 64 greedy steps; the best
of 3 per round. Ours is `python -m engine bench --repeat 3 --json` in a process of its own, llama.cpp runs in this
one: both use OpenMP, and libgomp reads its wait policy once per process, so in one process the first engine to
load it would set the other's (the app's kernel threads wait passively, llama.cpp's spin by default; ours decoded up
to 1.3x faster with spinning threads beside llama.cpp than in the app's own settings, measured 2026-12-07).
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import model_store  # noqa: E402
from engine.bench import prompt_text  # noqa: E402  (no numba, no OpenMP in this process)

PROMPT, DECODE, REPEAT = 128, 64, 3


def llama_cpp_run(path: Path, threads: int) -> tuple[float, float]:
    """(prefill tok/s, decode tok/s), the best of REPEAT, through llama-cpp-python on `threads` threads."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_threads=threads, n_threads_batch=threads, n_ctx=512, n_batch=512,
                verbose=False)
    ids = llm.tokenize(prompt_text(PROMPT).encode())[:PROMPT]
    best_prefill = best_decode = 0.0
    for _ in range(REPEAT):
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        prefill_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(DECODE):
            llm.eval([llm.sample(temp=0.0)])
        decode_s = time.perf_counter() - t0
        best_prefill, best_decode = max(best_prefill, PROMPT / prefill_s), max(best_decode, DECODE / decode_s)
    llm.close()
    return best_prefill, best_decode


def ours_run(path: Path) -> dict:
    """`python -m engine bench` on `path` in its own process: its BenchResult as a dict."""
    done = subprocess.run([sys.executable, "-m", "engine", "bench", "--model", str(path), "--repeat", str(REPEAT),
                           "--prompt-tokens", str(PROMPT), "--decode-tokens", str(DECODE), "--json"],
                          cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama-cpp-python is not installed: pip install llama-cpp-python (builds llama.cpp; see the docstring)")
        return 1
    args = sys.argv[1:]
    rounds = int(args[args.index("--rounds") + 1]) if "--rounds" in args else 2
    paths = [Path(a) for a in args if a.endswith(".gguf")]
    if not paths:
        paths = [model_store.local_path(m) for m in model_store.KNOWN_MODELS.values()]
    for path in paths:
        if not path.exists():
            print(f"skip: no {path} (python -m engine fetch --all)")
            continue
        for _ in range(rounds):
            ours = ours_run(path)
            if ours["cpu_threads"] is None:
                print("the CPU path runs numpy's float32 products here (numba missing or HALO_CPU_KERNELS=numpy): "
                      "nothing to compare")
                return 1
            prefill, decode = llama_cpp_run(path, ours["cpu_threads"])
            print(f"{path.name}: prefill ours {ours['prefill_tok_s']:.1f} / llama.cpp {prefill:.1f} tok/s "
                  f"({ours['prefill_tok_s'] / prefill:.2f}x), decode ours {ours['decode_tok_s']:.1f} / llama.cpp "
                  f"{decode:.1f} tok/s ({ours['decode_tok_s'] / decode:.2f}x)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
