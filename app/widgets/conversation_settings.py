"""Per-conversation system prompt and generation settings."""
from __future__ import annotations

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QPushButton, QVBoxLayout

from app.settings import Sampling
from app.widgets.sampling_form import SamplingForm


class ConversationSettingsDialog(QDialog):
    def __init__(self, title: str, system_prompt: str, sampling: Sampling, defaults: Sampling,
                 default_prompt: str, parent=None):
        super().__init__(parent)
        self.setWindowTitle(f"Settings for “{title}”")
        self.setMinimumWidth(440)
        self._defaults, self._default_prompt = defaults, default_prompt
        col = QVBoxLayout(self)
        col.addWidget(QLabel("System prompt"))
        self.system_prompt = QPlainTextEdit(system_prompt)
        self.system_prompt.setFixedHeight(90)
        col.addWidget(self.system_prompt)
        self.form = SamplingForm(sampling)
        col.addWidget(self.form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        reset = QPushButton("Use defaults")
        reset.clicked.connect(self._reset)
        buttons.addButton(reset, QDialogButtonBox.ButtonRole.ResetRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        col.addWidget(buttons)

    def _reset(self) -> None:
        self.form.set_value(self._defaults)
        self.system_prompt.setPlainText(self._default_prompt)

    def values(self) -> tuple[str, Sampling]:
        return self.system_prompt.toPlainText(), self.form.value()
