"""Says once, in words, that the GPU backend chosen in Settings is not what runs (the engine fell back to
the CPU), and what the engine is really running on, for the Diagnostics window."""
from __future__ import annotations

BACKEND_NAMES = {"hip": "AMD GPU (HIP)", "cuda": "NVIDIA GPU (CUDA)"}


def running_backend(client) -> tuple[str, str]:
    """(backend the loaded model runs on, the engine's reason), or ("", "") with no local model loaded."""
    info = getattr(client, "model", None)
    if info is None or info.backend.startswith("server:"):
        return "", ""
    return info.backend, getattr(client.engine, "backend_reason", "") or ""


class BackendFallbackNotice:
    """Shown at most once per backend setting per session (changing the setting re-arms it)."""

    def __init__(self, window):
        self.w = window
        self._warned: set[str] = set()

    def check(self) -> None:
        setting = self.w.settings.backend
        running, reason = running_backend(self.w.client)
        if setting not in BACKEND_NAMES or not running or not running.startswith("cpu") or setting in self._warned:
            return
        self._warned.add(setting)
        wanted = BACKEND_NAMES[setting]
        self.w.show_banner(f"The {wanted} is not available: running on the CPU",
                           f"Settings ask for the {wanted}, but it could not be used on this computer, so the "
                           f"model runs on the CPU (slower, same answers).\n\nWhy: {reason or 'not reported'}",
                           (("Use the CPU from now on", self._use_cpu), ("Diagnostics…", self.w.open_diagnostics)))

    def _use_cpu(self) -> None:
        self.w.settings.backend = "cpu"
        self.w.client.reconfigure("cpu", self.w.settings.async_scheduling)   # takes effect at the next load
        self.w.banner.hide()
        self.w._sync_banner_holder()
        self.w.status.update_engine(self.w)
