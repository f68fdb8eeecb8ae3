"""`python -m engine.model.kernel_bench`: the CPU's compiled matrix-vector products, per quant type, in billions
of weights a second: on the calling thread (the serial kernel) and on all the kernels' threads.

Random blocks with small finite scales (the speed does not depend on the values), one [rows, cols] matrix per
type, the best of --repeat timed loops of --seconds each. Decode reads every weight once per token, so a model's
decode time is about its weights divided by these rates, plus the attention and the per-layer work in numpy.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from engine.gguf.types import BLOCK_LAYOUT, HALF_FIELDS, GGMLType
from engine.model.quant_matrix import describe_kernels, kernel_blocks, kernel_path, kernel_threads

_MXFP4_EXPONENTS = (118, 130)      # shared exponents 2^-10..2^1: products stay finite


def random_blocks(t: GGMLType, rows: int, cols: int, rng, lead: tuple[int, ...] = (),
                  scale: float = 1e-3) -> np.ndarray:
    """Random blocks of type `t` with finite float16 scales in (-scale, scale): [*lead, rows, bytes per row]
    uint8. F16 is random normal values."""
    if t == GGMLType.F16:
        return rng.normal(size=(*lead, rows, cols)).astype("<f2").view(np.uint8)
    block, nbytes = BLOCK_LAYOUT[t]
    raw = rng.integers(0, 256, size=(*lead, rows, cols // block, nbytes), dtype=np.uint8)
    for at in HALF_FIELDS.get(t, ()):
        raw[..., at:at + 2] = rng.uniform(-scale, scale, size=raw.shape[:-1] + (1,)).astype("<f2").view(np.uint8)
    if t == GGMLType.MXFP4:
        raw[..., 0] = rng.integers(*_MXFP4_EXPONENTS, size=raw.shape[:-1])
    return raw.reshape(*lead, rows, -1)


def _rate(matvec, args: tuple, weights: int, seconds: float, repeat: int) -> float:
    """Billions of weights a second of matvec(*args), the best of `repeat` loops of about `seconds`."""
    matvec(*args)
    best = float("inf")
    for _ in range(repeat):
        n, t0 = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - t0) < seconds:
            matvec(*args)
            n += 1
        best = min(best, elapsed / n)
    return weights / best / 1e9


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--cols", type=int, default=2048, help="a multiple of 256")
    p.add_argument("--seconds", type=float, default=0.3)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    if kernel_path() != "numba":
        raise SystemExit(f"no compiled kernels here: {describe_kernels()}")
    from engine.model import quant_kernels as k
    print(describe_kernels())
    print(f"[{args.rows}, {args.cols}] matrix, best of {args.repeat} x {args.seconds} s; billions of weights a second")
    rng = np.random.default_rng(0)
    x = rng.normal(size=args.cols).astype(np.float32)
    out = np.empty(args.rows, np.float32)
    for t in kernel_blocks():
        raw = random_blocks(t, args.rows, args.cols, rng)
        raw.flags.writeable = False                     # as the file's map is (numba specialises on the flag)
        call = ((raw, k.NO_ROWS, k.NO_ROWS), x, out, k.F16_TABLE)
        kernels, weights = k.KERNELS[t], args.rows * args.cols
        one = _rate(kernels.serial_matvec, call, weights, args.seconds, args.repeat)
        every = _rate(kernels.matvec, call, weights, args.seconds, args.repeat)
        print(f"{t.name:6s} one thread {one:6.2f}   {kernel_threads()} threads {every:6.2f}")


if __name__ == "__main__":
    main()
