"""Host-memory pre-flight for the CPU path: what loading a model on the CPU costs in RAM, computed from the
GGUF header before anything is allocated, compared with the memory the OS says is available.

Without it a consistent but huge file (a sparse 1 TiB GGUF, or a 30B model on a 16 GB laptop) reached a
numpy allocation failure halfway through dequantizing, and the GPU pre-flight's advice "...or the CPU"
pointed users at that. The formulas are engine.model.arch's (one place); this module only adds the CPU's
scratch and compares.

weights: what the CPU path holds (arch.weight_bytes, "cpu"): quantized matrices at their file size where
         compiled kernels exist (engine.model.quant_matrix), everything else as float32;
kv:      the float32 KV cache of `num_blocks` blocks + `max_seqs` sequences' recurrent state;
scratch: one prefill chunk's activations and attention scores over the whole context, and the logits;
reserve: the interpreter, numpy and BLAS themselves.
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass

from engine.errors import OutOfHostMemoryError
from engine.model import arch
from engine.model.config import ModelConfig

GIB = 1 << 30
RESERVE = 512 << 20


@dataclass(frozen=True)
class HostMemoryPlan:
    weights: int
    kv: int
    scratch: int
    reserve: int = RESERVE

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.scratch + self.reserve

    def describe(self) -> str:
        return (f"weights {self.weights / GIB:.2f} GiB + KV cache {self.kv / GIB:.2f} GiB + scratch "
                f"{self.scratch / GIB:.2f} GiB + reserve {self.reserve / GIB:.2f} GiB = {self.total / GIB:.2f} GiB")


def plan_host_memory(config: ModelConfig, tensors, num_blocks: int, block_size: int, max_tokens: int,
                     max_seqs: int) -> HostMemoryPlan:
    c = config
    context = num_blocks * block_size
    est = arch.blocks_memory_estimate(c, num_blocks, block_size, "cpu", tensors, max_seqs)   # the CPU keeps f32
    per_token = 4 * (3 * c.n_embd + 2 * c.q_dim + 2 * c.kv_dim + 2 * c.n_ff)     # x, h, qkv, attn, gate/up
    scores = 4 * c.n_head * max_tokens * context                                  # [H, T, L] of one layer
    logits = 4 * max(max_seqs, max_tokens) * c.vocab_size
    # MoE: at most one expert's gate, up and down decoded to float32 at a time (engine.model.moe; the numpy
    # path), plus the router's logits and the experts' hidden activations of the step
    experts = 4 * (3 * c.n_ff_exp * c.n_embd + max_tokens * (c.n_expert + 2 * c.n_ff_exp)) if c.n_expert else 0
    return HostMemoryPlan(est.weights, est.kv_cache + est.recurrent_state,
                          per_token * max_tokens + scores + logits + experts)


def host_memory() -> tuple[int | None, int | None]:
    """(total, available) bytes of host RAM: what the OS can give this process now without swapping (Linux
    MemAvailable, Windows ullAvailPhys); None where the platform does not say. Diagnostics shows the same."""
    if sys.platform == "win32":
        class MemoryStatusEx(ctypes.Structure):
            _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                        ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                        ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                        ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                        ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]
        status = MemoryStatusEx(dwLength=ctypes.sizeof(MemoryStatusEx))
        if ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
            return int(status.ullTotalPhys), int(status.ullAvailPhys)
        return None, None
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return int(fields["MemTotal"].split()[0]) * 1024, int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError, IndexError):
        pass
    try:
        page = os.sysconf("SC_PAGE_SIZE")
        return os.sysconf("SC_PHYS_PAGES") * page, os.sysconf("SC_AVPHYS_PAGES") * page
    except (ValueError, OSError, AttributeError):
        return None, None


def available_host_memory() -> int | None:
    """Bytes the OS can give this process now (host_memory), or None where it cannot say (the check is then
    skipped rather than refusing everything)."""
    return host_memory()[1]


def host_shortfall(plan: HostMemoryPlan, available: int | None = None) -> str | None:
    """None when the plan fits (or the OS cannot say); otherwise the sentence that says by how much."""
    available = available_host_memory() if available is None else available
    if available is None or plan.total <= available:
        return None
    return (f"needs {plan.total / GIB:.2f} GiB of RAM on the CPU but only {available / GIB:.2f} GiB are "
            f"available ({plan.describe()})")


def check_host_fits(plan: HostMemoryPlan, what: str, available: int | None = None) -> None:
    """Raise OutOfHostMemoryError naming every figure when `plan` does not fit in the available RAM."""
    short = host_shortfall(plan, available)
    if short is not None:
        err = OutOfHostMemoryError(f"{what} {short}; pick a smaller model or quantization or a "
                                   f"shorter context, or close other programs")
        err.plan = plan
        raise err
