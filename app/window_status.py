"""The status bar: loaded model, backend, async scheduling, KV cache type, context used, speed of the last reply."""
from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar

from app.history_slot import history_slot
from app.widgets.elided_label import ElidedLabel


class StatusBar(QStatusBar):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.model_label = ElidedLabel("No model")      # long texts are cut with "…": never widen the window
        self.backend_label = ElidedLabel()
        self.async_label = ElidedLabel()
        self.kv_label = ElidedLabel()
        self.context_label = QLabel()
        self.speed_label = QLabel()
        self.note_label = ElidedLabel()
        self.addWidget(self.model_label)
        self.addWidget(self.backend_label)
        self.addWidget(self.async_label)
        self.addWidget(self.kv_label)
        self.addWidget(self.note_label, 1)
        self.addPermanentWidget(self.context_label)
        self.addPermanentWidget(self.speed_label)
        self._note_timer = QTimer(self, singleShot=True, interval=8000)
        self._note_timer.timeout.connect(lambda: self.note_label.setText(""))

    def flash(self, text: str) -> None:
        self.note_label.setText(text)
        self._note_timer.start()

    def update_engine(self, window) -> None:
        info = window.chat.model
        if info is None:
            self.model_label.setText("No model")
            self.backend_label.setText(f"Backend: {window.settings.backend} (next load)")
            self.async_label.setText(f"Async: {'on' if window.settings.async_scheduling else 'off'}")
            self.kv_label.setText("")
            return
        self.model_label.setText(f"Model: {info.name}")
        self.model_label.setToolTip(info.path)
        self.backend_label.setText(f"Backend: {_backend_text(info.backend)}")
        remote = info.backend.startswith("server:")
        self.async_label.setText("" if remote else f"Async scheduling: {'on' if info.async_scheduling else 'off'}")
        kv = getattr(info, "kv_cache_type", "")
        self.kv_label.setText(f"KV cache: {kv}" if kv and not remote else "")
        self.kv_label.setToolTip("The KV cache's element type as loaded: f32 is exact, f16 (GPU only) halves its "
                                 "memory. Settings > KV cache precision; the CPU always keeps f32.")

    def update_usage(self, usage) -> None:
        if usage is not None and usage.decode_tokens_per_s:     # 0: too short to time; the last speed stays
            self.speed_label.setText(f"{usage.decode_tokens_per_s:.1f} tok/s")
            self.speed_label.setToolTip(f"{usage.generated_tokens} tokens, first after "
                                        f"{usage.time_to_first_token_s * 1000:.0f} ms")

    @history_slot                   # called from slots outside the window too (app/window_models.py)
    def update_context(self, window) -> None:
        if window.current_id is None:
            self.context_label.setText("")
            return
        limit = context_limit(window)
        used, exact = context_used(window.store.messages(window.current_id))
        self.context_label.setText(f"Context: {'' if exact else '~'}{used:,} / {limit:,}")
        self.context_label.setToolTip("Tokens this conversation holds / the most the loaded model was given"
                                      + ("" if exact else " (~: estimated until the engine counts them)"))


def context_limit(window) -> int:
    """The engine's limit for the loaded model (what it allocated); before a load, the setting."""
    info = window.chat.model
    if info is not None and getattr(info, "max_context", 0):
        return info.max_context
    if info is not None and info.context_length:
        return min(window.settings.sampling.context_length, info.context_length)
    return window.settings.sampling.context_length


def context_used(messages) -> tuple[int, bool]:
    """(tokens, exact): the engine's count at the newest finished reply, plus ~4 characters a token for
    the messages after it (a message just sent counts at once, before its reply starts)."""
    base, rest = 0, messages
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.usage.get("prompt_tokens"):
            base = int(m.usage["prompt_tokens"]) + int(m.usage.get("generated_tokens", 0))
            rest = messages[i + 1:]
            break
    extra = sum(len(m.content) for m in rest) // 4
    return base + extra, not any(m.content for m in rest) and base > 0


def _backend_text(backend: str) -> str:
    kind, _, device = backend.partition(":")
    names = {"cpu": "CPU", "hip": "HIP", "cuda": "CUDA", "server": "Server"}
    return f"{names.get(kind, kind)} ({device})" if device else names.get(kind, kind)
