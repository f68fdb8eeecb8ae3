"""Print how long a model's tokenizer takes to build and to encode: `python -m engine.tokenizer_bench PATH`.

Figures: open_gguf (parse), tokenizer + chat template build from the metadata, and encode speed on a
~4k-character text that repeats one line (or the text of `--text FILE`: a sample without repeats shows what
a vocabulary lookup costs). Best of `--repeat` runs (the machine is shared; the best run is the least noisy).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from engine.gguf import open_gguf
from engine.prompt import PromptFormat

_SAMPLE = ("The quick brown fox jumps over the lazy dog. Ünïcödé, 日本語のテキスト, emoji 🚀🔥, code: "
           "def f(x):\n    return x**2  # comment\n") * 40


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--text", help="a UTF-8 text file to encode instead of the built-in sample")
    args = parser.parse_args(argv)
    sample = _SAMPLE if args.text is None else Path(args.text).read_text(encoding="utf-8")

    parse_s, build_s, encode_s = [], [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        with open_gguf(args.path) as gguf:
            t1 = time.perf_counter()
            fmt = PromptFormat.from_metadata(gguf.metadata)
            t2 = time.perf_counter()
        ids = fmt.tokenizer.encode(sample)
        t3 = time.perf_counter()
        parse_s.append(t1 - t0)
        build_s.append(t2 - t1)
        encode_s.append(t3 - t2)
    tok = fmt.tokenizer
    print(f"model: {args.path}")
    print(f"tokenizer: {tok.vocab.model} (pre {tok.vocab.pre!r}), {tok.n_vocab:,} tokens, "
          f"chat template: {'yes' if fmt.has_chat_template else 'no (completion only)'}")
    print(f"open_gguf:                 {min(parse_s) * 1000:8.1f} ms (best of {args.repeat})")
    print(f"tokenizer+template build:  {min(build_s) * 1000:8.1f} ms")
    print(f"open + build total:        {min(p + b for p, b in zip(parse_s, build_s, strict=False)) * 1000:8.1f} ms")
    print(f"encode {len(sample):,} chars -> {len(ids):,} ids: {min(encode_s) * 1000:8.1f} ms")


if __name__ == "__main__":
    main()
