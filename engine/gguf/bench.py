"""Print how fast a GGUF file opens and dequantizes:  python -m engine.gguf.bench PATH [--repeat N]

Open time is the whole parse (header, all metadata incl. the vocabulary, tensor infos, validation);
the first open may include reading the file from disk, the best of N shows the parser alone.
Dequantize figures are per type over every tensor of that type: input MB/s and output M elements/s.
"""
from __future__ import annotations

import argparse
import time
from collections import defaultdict

from engine.gguf import open_gguf


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m engine.gguf.bench", description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--repeat", type=int, default=5, help="opens to time (default 5)")
    args = parser.parse_args(argv)

    opens = []
    for _ in range(max(1, args.repeat)):
        start = time.perf_counter()
        gguf = open_gguf(args.path)
        opens.append(time.perf_counter() - start)
        gguf.close()
    gguf = open_gguf(args.path)
    print(f"{args.path}")
    print(f"  {gguf.file_size / 1e6:.1f} MB, GGUF v{gguf.version}, {len(gguf.metadata)} keys, "
          f"{len(gguf.tensors)} tensors")
    print(f"  open (ms): {', '.join(f'{t * 1e3:.0f}' for t in opens)}; best {min(opens) * 1e3:.1f}")

    per_type: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0, 0])   # bytes, elements, seconds, count
    for name, info in gguf.tensors.items():
        start = time.perf_counter()
        gguf.dequantize(name)
        row = per_type[info.ggml_type.name]
        row[0] += info.nbytes
        row[1] += info.n_elements
        row[2] += time.perf_counter() - start
        row[3] += 1
    print(f"  {'type':<6} {'tensors':>7} {'MB in':>8} {'M elems':>8} {'seconds':>8} {'MB/s in':>8} {'Melem/s':>8}")
    total_seconds = 0.0
    for type_name, (nbytes, n_elements, seconds, count) in sorted(per_type.items()):
        total_seconds += seconds
        print(f"  {type_name:<6} {count:>7} {nbytes / 1e6:>8.1f} {n_elements / 1e6:>8.1f} {seconds:>8.3f} "
              f"{nbytes / 1e6 / seconds:>8.0f} {n_elements / 1e6 / seconds:>8.0f}")
    print(f"  dequantize whole model: {total_seconds:.2f} s")
    gguf.close()


if __name__ == "__main__":
    main()
