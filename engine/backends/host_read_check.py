"""Child-process check: can the host read device-written memory of one allocation kind, for real?

Run as `python -m engine.backends.host_read_check <backend> <kind>`, kind "device" (a plain allocation,
cudaMalloc/hipMalloc: what the engine's buffers are) or "managed" (cudaMallocManaged/hipMallocManaged);
prints one JSON line {"ok": bool, "detail": str}. It runs in a child because the read may fault (that is
the question): a fault kills only the child, and the parent reports "the child died with SIGSEGV".
The two kinds are separate facts: on a discrete NVIDIA GPU managed memory is host-readable (the driver
migrates pages on fault) while a plain device allocation segfaults the reader. Only the "device" answer
decides whether the engine's own buffers are host-addressable.
"""
from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys

PATTERN = 0x5A
NBYTES = 4096
KINDS = ("device", "managed")


def _child(name: str, kind: str) -> dict:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind[:40]!r}")
    from .registry import make_binding
    rt = make_binding(name)
    rt.load()
    rt.set_device(0)
    ptr = rt.malloc(NBYTES) if kind == "device" else rt.malloc_managed(NBYTES)
    advisory = ""
    if kind == "managed":
        try:
            rt.mem_advise_read_mostly(ptr, NBYTES, 0)
        except Exception as e:     # advice is optional; report it and go on
            advisory = f"; advisory read-mostly advice failed: {e}"
    rt.memset_async(ptr, PATTERN, NBYTES, 0)          # written by the device ...
    rt.device_synchronize()
    data = ctypes.string_at(ptr, NBYTES)             # ... read by the host: may fault, hence the child
    rt.free(ptr)
    ok = data == bytes([PATTERN]) * NBYTES
    return {"ok": ok, "detail": ("host read the device's bytes" if ok else "host read wrong bytes") + advisory}


def run_in_child(name: str, kind: str, timeout: float = 60.0) -> str:
    """'passed' or 'failed: <why>': the value of DeviceFacts.device_host_read / managed_host_read."""
    what = "a plain device allocation" if kind == "device" else "managed memory"
    try:
        proc = subprocess.run([sys.executable, "-m", "engine.backends.host_read_check", name, kind],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"failed: the child did not finish within {timeout:.0f} s"
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name if -proc.returncode in signal.Signals._value2member_map_ else ""
        return f"failed: the child died with signal {-proc.returncode} {sig} reading {what}"
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"failed: exit {proc.returncode}, no answer ({proc.stderr.strip()[-300:]})"
    return "passed" if answer.get("ok") else f"failed: {answer.get('detail')}"


if __name__ == "__main__":
    try:
        print(json.dumps(_child(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")))
    except Exception as e:
        print(json.dumps({"ok": False, "detail": f"{type(e).__name__}: {e}"}))
