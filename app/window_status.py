"""The status bar: loaded model, backend, async scheduling, context used, speed of the last reply."""
from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QLabel, QStatusBar


class StatusBar(QStatusBar):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setSizeGripEnabled(False)
        self.model_label = QLabel("No model")
        self.backend_label = QLabel()
        self.async_label = QLabel()
        self.context_label = QLabel()
        self.speed_label = QLabel()
        self.note_label = QLabel()
        self.addWidget(self.model_label)
        self.addWidget(self.backend_label)
        self.addWidget(self.async_label)
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
            return
        self.model_label.setText(f"Model: {info.name}")
        self.model_label.setToolTip(info.path)
        self.backend_label.setText(f"Backend: {_backend_text(info.backend)}")
        remote = info.backend.startswith("server:")
        self.async_label.setText("" if remote else f"Async scheduling: {'on' if info.async_scheduling else 'off'}")

    def update_usage(self, usage) -> None:
        if usage is not None and usage.generated_tokens:
            self.speed_label.setText(f"{usage.decode_tokens_per_s:.1f} tok/s")
            self.speed_label.setToolTip(f"{usage.generated_tokens} tokens, first after "
                                        f"{usage.time_to_first_token_s * 1000:.0f} ms")

    def update_context(self, window) -> None:
        info = window.chat.model
        if window.current_id is None:
            self.context_label.setText("")
            return
        _prompt, sampling = window.conversation_settings(window.current_id)
        limit = min(sampling.context_length, info.context_length) if info else sampling.context_length
        used = _last_context_tokens(window.store.messages(window.current_id))
        if used is None:
            used = window.store.token_estimate(window.current_id)
            self.context_label.setText(f"Context: ~{used:,} / {limit:,}")
        else:
            self.context_label.setText(f"Context: {used:,} / {limit:,}")


def _last_context_tokens(messages) -> int | None:
    for m in reversed(messages):
        if m.role == "assistant" and m.usage.get("prompt_tokens"):
            return int(m.usage["prompt_tokens"]) + int(m.usage.get("generated_tokens", 0))
    return None


def _backend_text(backend: str) -> str:
    kind, _, device = backend.partition(":")
    names = {"cpu": "CPU", "hip": "HIP", "cuda": "CUDA", "server": "Server"}
    return f"{names.get(kind, kind)} ({device})" if device else names.get(kind, kind)
