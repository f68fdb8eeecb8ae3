"""Fields for the generation settings; used by the Settings dialog (defaults) and per conversation."""
from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QDoubleSpinBox, QFormLayout, QSpinBox, QWidget

from app.settings import SAMPLING_LIMITS, Sampling

# engine.context_fit's policies, as the user reads them
OVERFLOW_LABELS = {"stop": "Stop and say so", "drop_oldest": "Drop the oldest turns, keep the system prompt",
                   "rolling": "Rolling window (drop the oldest messages)"}


class SamplingForm(QWidget):
    def __init__(self, value: Sampling, parent=None):
        super().__init__(parent)
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)
        self.temperature = _double(*SAMPLING_LIMITS["temperature"], 0.05, 2)
        self.temperature.setToolTip("0 picks the most likely token every time (deterministic)")
        self.top_p = _double(*SAMPLING_LIMITS["top_p"], 0.01, 2)
        self.top_k = _int(*SAMPLING_LIMITS["top_k"])
        self.top_k.setSpecialValueText("off")
        self.max_tokens = _int(*SAMPLING_LIMITS["max_tokens"])
        self.context_length = _int(*SAMPLING_LIMITS["context_length"], step=256)
        self.seed = _int(*SAMPLING_LIMITS["seed"])
        self.seed.setSpecialValueText("random")
        form.addRow("Temperature", self.temperature)
        form.addRow("Top-p", self.top_p)
        form.addRow("Top-k", self.top_k)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Context length", self.context_length)
        form.addRow("Seed", self.seed)
        self.context_overflow = QComboBox()
        for key, label in OVERFLOW_LABELS.items():
            self.context_overflow.addItem(label, key)
        self.context_overflow.setToolTip("What happens when the conversation no longer fits the context")
        form.addRow("When the chat is too long", self.context_overflow)
        self.set_value(value)

    def set_value(self, v: Sampling) -> None:
        self.temperature.setValue(v.temperature)
        self.top_p.setValue(v.top_p)
        self.top_k.setValue(v.top_k)
        self.max_tokens.setValue(v.max_tokens)
        self.context_length.setValue(v.context_length)
        self.seed.setValue(v.seed)
        self.context_overflow.setCurrentIndex(max(0, self.context_overflow.findData(v.context_overflow)))

    def value(self) -> Sampling:
        return Sampling(temperature=round(self.temperature.value(), 4), top_p=round(self.top_p.value(), 4),
                        top_k=self.top_k.value(), max_tokens=self.max_tokens.value(),
                        context_length=self.context_length.value(), seed=self.seed.value(),
                        context_overflow=self.context_overflow.currentData())


def _double(lo: float, hi: float, step: float, decimals: int) -> QDoubleSpinBox:
    box = QDoubleSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    box.setDecimals(decimals)
    return box


def _int(lo: int, hi: int, step: int = 1) -> QSpinBox:
    box = QSpinBox()
    box.setRange(lo, hi)
    box.setSingleStep(step)
    return box
