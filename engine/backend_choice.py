"""Which backend a model is built on and whether steps overlap, and why (engine.core.setup.BackendChoice).

Async scheduling is decided by engine.diagnostics.async_scheduling_decision from the backend's PROBED
capability `async_sampled_token_readback` (a safe readback path exists), the app setting and
HALO_ASYNC_SCHEDULING=0; the reason string is what the diagnostics view and status bar show.
"""
from __future__ import annotations

from engine.core.setup import BackendChoice


def choose_backend(setting: str = "cpu", async_setting: bool = True, env: dict | None = None) -> BackendChoice:
    """`setting`: "auto", "cpu", "cuda", "hip" (diagnostics.BACKEND_SETTINGS) or a registry name."""
    from engine.backends.probe import probe
    from engine.backends.registry import BACKENDS
    from engine.diagnostics import async_scheduling_decision, select_backend

    if setting in BACKENDS:
        selected = probe(setting, host_read_checks=False)
        why = f"asked for {setting}" if selected.available else f"{setting} is not available: {selected.reason}"
        selected = selected if selected.available else None
    else:
        selected, why = select_backend(_probes_for(setting), setting)
    if selected is None:                              # fall back to the CPU, saying why
        selected, why = probe("cpu"), f"CPU fallback: {why}"
    on, async_why = async_scheduling_decision(selected, async_setting, env)
    return BackendChoice(selected.backend, why, on, async_why)


def _probes_for(setting: str) -> list:
    """What select_backend needs to decide `setting`: the probes of the backends it takes ("auto": every one), in
    registry order, up to the first available one, which it takes. Every load asks, and a probe loads a runtime:
    ctypes-hip's took 0.45 s on the H200 (an installed HIP runtime, no AMD device), for a setting of "cuda"."""
    from engine.backends.probe import probe
    from engine.backends.registry import BACKENDS

    probes = []
    for name, spec in BACKENDS.items():
        if setting == "auto" or spec.api == setting:
            probes.append(probe(name, host_read_checks=False))
            if probes[-1].available:
                break
    return probes
