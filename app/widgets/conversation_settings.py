"""Per-conversation system prompt, generation settings and chat-template switches."""
from __future__ import annotations

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
)

from app.settings import Sampling
from app.widgets.sampling_form import SamplingForm
from engine.api import REASONING_EFFORTS


class ConversationSettingsDialog(QDialog):
    def __init__(self, title: str, system_prompt: str, sampling: Sampling, defaults: Sampling,
                 default_prompt: str, parent=None, template_options: dict | None = None,
                 supported: tuple[str, ...] = ()):
        """`supported`: the switches the loaded model's template reads (ModelInfo.template_options); only
        those are shown. `template_options`: this chat's stored values."""
        super().__init__(parent)
        self.setWindowTitle(f"Settings for “{title}”")
        self.setMinimumWidth(440)
        self._defaults, self._default_prompt = defaults, default_prompt
        col = QVBoxLayout(self)
        col.addWidget(QLabel("System prompt"))
        self.system_prompt = QPlainTextEdit(system_prompt)
        self.system_prompt.setFixedHeight(90)
        self.system_prompt.setTabChangesFocus(True)     # Tab goes on to the next control, as in Windows dialogs
        col.addWidget(self.system_prompt)
        self.form = SamplingForm(sampling)
        col.addWidget(self.form)
        stored = template_options or {}
        switches = QFormLayout()
        self.thinking = self.effort = None
        if "enable_thinking" in supported:
            self.thinking = QCheckBox("Think before answering (shown in a collapsed Thinking section)")
            self.thinking.setChecked(bool(stored.get("enable_thinking", True)))   # the templates' default
            switches.addRow("Thinking", self.thinking)
        if "reasoning_effort" in supported:
            self.effort = QComboBox()
            self.effort.addItems(REASONING_EFFORTS)
            self.effort.setCurrentText(stored.get("reasoning_effort", "medium"))
            switches.addRow("Reasoning effort", self.effort)
        if switches.rowCount():
            col.addLayout(switches)
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

    def template_options(self) -> dict:
        """The switches shown, as the store keeps them (those not shown are left as they were)."""
        options = {}
        if self.thinking is not None:
            options["enable_thinking"] = self.thinking.isChecked()
        if self.effort is not None:
            options["reasoning_effort"] = self.effort.currentText()
        return options
