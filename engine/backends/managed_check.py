"""Child-process check: is device-written managed memory readable on the host, on this machine, for real?

Run as `python -m engine.backends.managed_check <backend>`; prints one JSON line {"ok": bool, "detail": str}.
It runs in a child because the read may fault (that is the question): a fault kills only the child, and
the parent reports "the child died with SIGSEGV". The one advisory call (read-mostly advice) may fail.
"""
from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys

PATTERN = 0x5A
NBYTES = 4096


def _child(name: str) -> dict:
    from .registry import make_binding
    rt = make_binding(name)
    rt.load()
    rt.set_device(0)
    ptr = rt.malloc_managed(NBYTES)
    advisory = ""
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


def run_in_child(name: str, timeout: float = 60.0) -> str:
    """'passed' or 'failed: <why>' -- the value DeviceFacts.managed_host_read takes."""
    try:
        proc = subprocess.run([sys.executable, "-m", "engine.backends.managed_check", name],
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"failed: the child did not finish within {timeout:.0f} s"
    if proc.returncode < 0:
        sig = signal.Signals(-proc.returncode).name if -proc.returncode in signal.Signals._value2member_map_ else ""
        return f"failed: the child died with signal {-proc.returncode} {sig} reading managed memory"
    try:
        answer = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"failed: exit {proc.returncode}, no answer ({proc.stderr.strip()[-300:]})"
    return "passed" if answer.get("ok") else f"failed: {answer.get('detail')}"


if __name__ == "__main__":
    try:
        print(json.dumps(_child(sys.argv[1])))
    except Exception as e:
        print(json.dumps({"ok": False, "detail": f"{type(e).__name__}: {e}"}))
