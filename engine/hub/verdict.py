"""Does a (remote) model fit this machine? Answered from the header alone with the engine's own numbers:
`ModelConfig.from_metadata` (can the engine run the architecture at all), `gpu_unsupported_reason` (can the
GPU path run it) and `memory_estimate` (what loading it costs on each backend). Nothing is recomputed here.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from engine.errors import EngineError
from engine.gguf import GGUFHeader
from engine.gpu.weights import gpu_unsupported_reason  # imports no driver
from engine.model.arch import memory_estimate
from engine.model.config import ModelConfig

Fit = Literal["gpu", "cpu", "too_large", "unsupported"]
VERDICT_CONTEXT = 4096          # the context a verdict assumes (the app's default chat length)
GIB = 1 << 30


@dataclass(frozen=True)
class Machine:
    """Memory the model could use: the best GPU's free memory (None: no usable GPU) and the host's RAM."""

    ram_free: int
    gpu_free: int | None = None
    gpu_name: str = ""


@dataclass(frozen=True)
class Verdict:
    fit: Fit
    words: str                     # one line for the user, with the numbers
    architecture: str = ""
    gpu_bytes: int = 0             # memory_estimate(...).total on each backend; 0 when not computed
    cpu_bytes: int = 0


def current_machine() -> Machine:
    """Asks the backend probe (never raises; ~1 s: call once, off the GUI thread)."""
    from engine.backends.probe import probe_all

    ram, gpu, name = 0, None, ""
    for r in probe_all(host_read_checks=False):
        if not r.available or r.facts is None:
            continue
        free = r.facts.free_memory or 0
        if r.facts.api == "cpu":
            ram = max(ram, free)
        elif free > (gpu or 0):
            gpu, name = free, r.facts.name
    return Machine(ram_free=ram, gpu_free=gpu, gpu_name=name)


def fit_verdict(header: GGUFHeader, machine: Machine, context: int = VERDICT_CONTEXT) -> Verdict:
    arch = header.metadata.get("general.architecture")
    arch = arch if isinstance(arch, str) else ""
    try:
        config = ModelConfig.from_metadata(header.metadata)
    except EngineError as e:
        return Verdict("unsupported", f"cannot run here: {e}", arch)
    tensors = list(header.tensors.values())
    cpu = memory_estimate(config, context, "cpu", tensors).total
    gpu = memory_estimate(config, context, "gpu", tensors).total
    gpu_refusal = gpu_unsupported_reason(config, tensors)
    need = f"needs {_gib(gpu)} on the GPU, {_gib(cpu)} on the CPU at {context} tokens"
    if machine.gpu_free is not None and gpu_refusal is None and gpu <= machine.gpu_free:
        return Verdict("gpu", f"fits on the GPU: {need}; {_gib(machine.gpu_free)} free on {machine.gpu_name}",
                       arch, gpu, cpu)
    if cpu <= machine.ram_free:
        why = ("no usable GPU" if machine.gpu_free is None else gpu_refusal
               or f"{_gib(machine.gpu_free)} free on the GPU")
        return Verdict("cpu", f"fits on the CPU only ({why}): {need}; {_gib(machine.ram_free)} RAM free",
                       arch, gpu, cpu)
    gpu_free = "no usable GPU" if machine.gpu_free is None else f"{_gib(machine.gpu_free)} free on the GPU"
    return Verdict("too_large", f"too large: {need}; {gpu_free}, {_gib(machine.ram_free)} RAM free", arch, gpu, cpu)


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"
