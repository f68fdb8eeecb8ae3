"""`python -m engine.backends [--json] [--no-self-test]`: PASS/FAIL per backend with the reason."""
from __future__ import annotations

import argparse
import json
import sys

from .probe import probe_all


def report(self_test: bool = True, as_json: bool = False) -> tuple[str, int]:
    """The text the CLI's `diagnose` prints, and an exit code (0 when at least one backend passed)."""
    results = probe_all(self_test=self_test)
    if as_json:
        text = json.dumps([r.to_dict() for r in results], indent=2)
    else:
        lines = [r.summary_line() for r in results]
        for r in results:
            if r.kernels:
                lines.append(f"  {r.backend}: {r.kernels}")
            if r.available and r.capabilities:
                c = r.capabilities
                lines.append(f"  {r.backend}: unified_memory={c.unified_memory.value} ({c.unified_memory.reason})")
                lines.append(f"  {r.backend}: device_memory_host_addressable={c.device_memory_host_addressable.value}"
                             f" ({c.device_memory_host_addressable.reason})")
                lines.append(f"  {r.backend}: async_sampled_token_readback={c.async_sampled_token_readback.value}; "
                             f"path {c.readback_path} ({c.readback_reason})")
        text = "\n".join(lines)
    ok = any(r.available and (r.self_test is None or r.self_test.passed) for r in results)
    return text, 0 if ok else 1


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.backends")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-self-test", action="store_true")
    args = p.parse_args(argv)
    text, code = report(self_test=not args.no_self_test, as_json=args.json)
    print(text)
    return code


if __name__ == "__main__":
    sys.exit(main())
