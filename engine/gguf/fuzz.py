"""`python -m engine.gguf.fuzz --seconds 30 [--seed N] [SEED.gguf ...]`: mutate valid GGUF files and check
that every reader either accepts each result or raises one of our typed errors.

Invariant (SAFETY.md): any byte string opens, or raises InvalidModelError / UnsupportedModelError /
TemplateError, in bounded time, through every reader a model load uses: the parser, ModelInfo,
ModelConfig, the tokenizer, the chat template. Anything else (an untyped exception) is a finding: it is
printed with its traceback and the mutated file is kept, and the exit status is 1.

Mutations: flipped bits and bytes, truncation, overwritten length/count fields (u64 at random offsets),
and typed metadata swaps (a random key given a value of another GGUF type, engine.gguf.mutate).
Without seed files the tiny models in tests/golden/data are used when present.
"""
from __future__ import annotations

import argparse
import logging
import random
import struct
import sys
import tempfile
import time
import traceback
from pathlib import Path

from engine.errors import EngineError
from engine.gguf.mutate import V, split, with_metadata

_DEFAULT_SEEDS = Path(__file__).resolve().parents[2] / "tests" / "golden" / "data"
_ODD_VALUES = [
    (V.STRING, "false"), (V.STRING, ""), (V.STRING, "x" * 300), (V.BOOL, True), (V.INT32, -1), (V.UINT32, 0),
    (V.UINT32, 1), (V.UINT64, (1 << 64) - 1), (V.FLOAT32, float("nan")), (V.FLOAT32, float("inf")),
    (V.FLOAT64, 1e300), (V.FLOAT32, 0.0), (V.ARRAY, (V.UINT8, [1, 2, 3])), (V.ARRAY, (V.STRING, ["a", "b"])),
    (V.ARRAY, (V.FLOAT32, [])), (V.ARRAY, (V.BOOL, [True])),
]


def read_everything(path: Path) -> None:
    """Every reader a model load runs, without the weights' dequantization."""
    from engine.gguf import open_gguf
    from engine.model.config import ModelConfig
    from engine.model.loader import model_info
    from engine.prompt import PromptFormat

    with open_gguf(path) as gguf:
        model_info(path, gguf)
        try:
            ModelConfig.from_metadata(gguf.metadata)
        finally:
            PromptFormat.from_metadata(gguf.metadata)


def mutate(data: bytes, rng: random.Random) -> bytes:
    kind = rng.randrange(5)
    buf = bytearray(data)
    if kind == 0:                                   # flip a few bits, mostly in the header and metadata
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(min(len(buf), 1 << 16) if rng.random() < 0.9 else len(buf))
            buf[at] ^= 1 << rng.randrange(8)
    elif kind == 1:                                 # random bytes
        for _ in range(rng.randint(1, 4)):
            buf[rng.randrange(min(len(buf), 1 << 16))] = rng.randrange(256)
    elif kind == 2:                                 # truncate
        del buf[rng.randrange(len(buf)):]
    elif kind == 3:                                 # a hostile length or count
        at = rng.randrange(max(1, min(len(buf), 1 << 16) - 8))
        value = rng.choice([0, 1, 0xFFFFFFFF, 1 << 40, (1 << 64) - 1, rng.randrange(1 << 20)])
        buf[at:at + 8] = struct.pack("<Q", value)
    else:                                           # a typed metadata swap
        keys = list(split(data)[0])
        return with_metadata(data, {rng.choice(keys): rng.choice(_ODD_VALUES)})
    return bytes(buf)


def run(seeds: list[Path], seconds: float, seed: int, out=sys.stdout) -> tuple[int, int]:
    """Fuzz for `seconds`; returns (cases, untyped failures)."""
    rng = random.Random(seed)
    corpus = [p.read_bytes() for p in seeds]
    cases = failures = 0
    slowest = 0.0
    deadline = time.monotonic() + seconds
    with tempfile.TemporaryDirectory(prefix="halo-fuzz-") as tmp:
        path = Path(tmp) / "case.gguf"
        while time.monotonic() < deadline:
            data = mutate(rng.choice(corpus), rng)
            path.write_bytes(data)
            start = time.monotonic()
            try:
                read_everything(path)
            except EngineError:
                pass
            except Exception:             # noqa: BLE001 - the finding this tool exists for
                failures += 1
                kept = Path(tempfile.gettempdir()) / f"halo-fuzz-finding-{seed}-{cases}.gguf"
                kept.write_bytes(data)
                print(f"UNTYPED EXCEPTION on case {cases} (kept as {kept}):\n{traceback.format_exc()}", file=out)
            slowest = max(slowest, time.monotonic() - start)
            cases += 1
    print(f"{cases} cases in {seconds:.0f} s, {failures} untyped exceptions, slowest case {slowest:.2f} s",
          file=out)
    return cases, failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.gguf.fuzz", description=__doc__.split("\n\n")[0])
    p.add_argument("seeds", nargs="*", type=Path, help="valid GGUF files to mutate (small ones: each case "
                   "rewrites one)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    args = p.parse_args(argv)
    seeds = args.seeds or sorted(p for p in _DEFAULT_SEEDS.glob("*.gguf") if p.stat().st_size < 4 << 20)
    if not seeds:
        p.error("give seed .gguf files (tests/golden/data is not here)")
    logging.disable(logging.WARNING)     # mutated files make readers warn on every case; findings are printed
    seed = args.seed if args.seed is not None else int(time.time())
    print(f"fuzzing {len(seeds)} seed files, random seed {seed}")
    _, failures = run(seeds, args.seconds, seed)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
