"""The server's benchmark: aggregate tokens/s and time to first token at several concurrencies, measured the
way clients see it (streamed completions over loopback HTTP, through uvicorn, the guard and the engine).

    python -m engine.server.bench --model M [--backend cpu|cuda-python|...] [--kv-type f32|f16]
                                  [--concurrency 1 4 16] [--prompt-tokens 128] [--decode-tokens 64] [--rounds 3]
                                  [--json]
    python -m engine.server.bench --url http://127.0.0.1:8080 [--api-key K] ...   (a server already running)

Per round, `c` streamed requests are sent at once (greedy, `decode-tokens` each, fewer only where the model
ends its reply). Time to first token: from sending a request to its first SSE chunk (the server opens the
stream when the request's first token exists). Aggregate tok/s: completion tokens of all rounds / the sum of
the rounds' wall times (first send to last [DONE]). p50/p99: linear interpolation over every request of
that concurrency. One warm-up request runs first.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import asdict, dataclass

import httpx
import numpy as np

from engine.model.arch import DEFAULT_KV_CACHE_TYPE

COUNTING_STEP = 1                 # the prompt counts 1, 2, 3, ...: a model keeps counting, rarely stops


@dataclass(frozen=True)
class LevelResult:
    concurrency: int
    requests: int
    prompt_tokens: int              # per request
    completion_tokens: int          # all requests of this level
    wall_s: float                   # summed over rounds
    aggregate_tok_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float


@dataclass(frozen=True)
class BenchResult:
    model: str
    backend: str
    levels: tuple[LevelResult, ...]
    kv_cache_type: str = ""         # what the served model's KV cache holds ("" for a server already running)


def counting_prompt(n: int) -> str:
    return ", ".join(str(i) for i in range(1, n + 1)) + ","


async def _one(client: httpx.AsyncClient, body: dict) -> tuple[float, int, int]:
    """(seconds to the first chunk, completion tokens, prompt tokens) of one streamed completion."""
    t0 = time.perf_counter()
    ttft, usage = None, None
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"the server answered {r.status_code}: {(await r.aread()).decode()[:300]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            if ttft is None:
                ttft = time.perf_counter() - t0
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"the stream failed: {chunk['error'].get('message')}")
            if chunk.get("usage"):
                usage = chunk["usage"]
    if ttft is None or usage is None:
        raise RuntimeError("a stream ended without tokens or usage")
    return ttft, usage["completion_tokens"], usage["prompt_tokens"]


async def _prompt_for(client: httpx.AsyncClient, model: str, target_tokens: int) -> str:
    """A counting prompt of about `target_tokens` tokens (asks the server once and scales)."""
    n = max(1, target_tokens // 2)
    for _ in range(3):
        body = {"model": model, "prompt": counting_prompt(n), "max_tokens": 1, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        _, _, tokens = await _one(client, body)
        if abs(tokens - target_tokens) <= max(2, target_tokens // 20):
            break
        n = max(1, round(n * target_tokens / tokens))
    return counting_prompt(n)


async def _level(client, model: str, prompt: str, concurrency: int, decode_tokens: int, rounds: int) -> LevelResult:
    body = {"model": model, "prompt": prompt, "max_tokens": decode_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    ttfts, tokens, wall, prompt_tokens = [], 0, 0.0, 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        results = await asyncio.gather(*(_one(client, body) for _ in range(concurrency)))
        wall += time.perf_counter() - t0
        for ttft, n, p in results:
            ttfts.append(ttft)
            tokens += n
            prompt_tokens = p
    ms = np.array(ttfts) * 1000
    return LevelResult(concurrency, len(ttfts), prompt_tokens, tokens, round(wall, 3), round(tokens / wall, 1),
                       round(float(np.percentile(ms, 50)), 1), round(float(np.percentile(ms, 99)), 1))


async def bench_url(url: str, api_key: str | None, concurrencies: list[int], prompt_tokens: int,
                    decode_tokens: int, rounds: int) -> tuple[str, list[LevelResult]]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=max(concurrencies) + 4)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as client:
        models = (await client.get("/v1/models")).json()["data"]
        if not models:
            raise RuntimeError("the server has no model loaded")
        model = models[0]["id"]
        prompt = await _prompt_for(client, model, prompt_tokens)
        levels = [await _level(client, model, prompt, c, decode_tokens, rounds) for c in concurrencies]
    return model, levels


def run_local(model_path: str, backend: str, concurrencies: list[int], prompt_tokens: int, decode_tokens: int,
              rounds: int, kv_cache_type: str = DEFAULT_KV_CACHE_TYPE) -> BenchResult:
    """An Engine and the server in this process on a free loopback port, as `python -m engine serve` runs."""
    from engine.cli import resolve_model
    from engine.engine import Engine
    from engine.server.guard import ServerConfig
    from engine.server.run import ServerThread, free_port

    top = max(concurrencies)
    engine = Engine(backend=backend, max_num_seqs=top, kv_cache_tokens=top * (prompt_tokens * 2 + decode_tokens + 64),
                    kv_cache_type=kv_cache_type)
    try:
        info = engine.load(resolve_model(argparse.Namespace(model=model_path))).result()
        config = ServerConfig(port=free_port(), max_pending=top + 4)
        server = ServerThread(engine, config)
        server.start()
        try:
            model, levels = asyncio.run(bench_url(f"http://127.0.0.1:{config.port}", None, concurrencies,
                                                  prompt_tokens, decode_tokens, rounds))
        finally:
            server.stop()
    finally:
        engine.shutdown()
    return BenchResult(model, info.backend, tuple(levels), info.kv_cache_type)


def format_result(r: BenchResult) -> str:
    kv = f", KV cache {r.kv_cache_type}" if r.kv_cache_type else ""
    lines = [f"{r.model} on {r.backend}{kv}, streamed completions over loopback HTTP",
             f"{'concurrency':>11} {'requests':>8} {'prompt':>6} {'tokens':>7} {'wall s':>7} {'tok/s':>7} "
             f"{'TTFT p50':>9} {'TTFT p99':>9}"]
    for v in r.levels:
        lines.append(f"{v.concurrency:>11} {v.requests:>8} {v.prompt_tokens:>6} {v.completion_tokens:>7} "
                     f"{v.wall_s:>7.2f} {v.aggregate_tok_s:>7.1f} {v.ttft_p50_ms:>7.0f}ms {v.ttft_p99_ms:>7.0f}ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.server.bench", description=__doc__.split("\n\n")[0])
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--model", "-m", help="a .gguf path or a known model key: serve it here and bench it")
    where.add_argument("--url", help="bench a server already running at this base URL (without /v1)")
    p.add_argument("--api-key")
    p.add_argument("--backend", default="cpu", help="with --model: cpu, cuda-python, ctypes-cuda, ...")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16])
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--decode-tokens", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3, help="rounds per concurrency")
    p.add_argument("--json", action="store_true")
    from engine.cli import add_kv_type_arg
    add_kv_type_arg(p)
    args = p.parse_args(argv)
    if args.model:
        result = run_local(args.model, args.backend, args.concurrency, args.prompt_tokens, args.decode_tokens,
                           args.rounds, args.kv_type)
    else:
        model, levels = asyncio.run(bench_url(args.url.rstrip("/"), args.api_key, args.concurrency,
                                              args.prompt_tokens, args.decode_tokens, args.rounds))
        result = BenchResult(model, "remote", tuple(levels))
    print(json.dumps(asdict(result)) if args.json else format_result(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
