"""The app's Settings: engine (backend, async scheduling, KV cache precision), model folders, default sampling,
theme."""
from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.settings import BACKENDS, THEMES, AppSettings
from app.widgets.sampling_form import SamplingForm
from app.window_layout import make_scrollable
from engine.model.arch import KV_CACHE_TYPES
from engine.paths import models_dir

BACKEND_LABELS = {"auto": "Automatic (best available)", "hip": "AMD GPU (HIP)", "cuda": "NVIDIA GPU (CUDA)",
                  "cpu": "CPU"}
THEME_LABELS = {"system": "Follow system", "light": "Light", "dark": "Dark"}
KV_CACHE_LABELS = {"f32": "Float32 (exact)", "f16": "Float16 (half the memory)"}


class SettingsDialog(QDialog):
    """Edits a copy; `apply()` writes everything to `settings` (the caller calls it on accept)."""

    def __init__(self, settings: AppSettings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.setWindowTitle("Settings")
        self.setMinimumWidth(520)
        content = QWidget()
        col = QVBoxLayout(content)

        engine = QGroupBox("Engine")
        ef = QFormLayout(engine)
        self.backend = QComboBox()
        for key in BACKENDS:
            self.backend.addItem(BACKEND_LABELS[key], key)
        self.backend.setCurrentIndex(BACKENDS.index(settings.backend))
        ef.addRow("Backend", self.backend)
        self.async_scheduling = QCheckBox("Overlap GPU steps (async scheduling)")
        self.async_scheduling.setChecked(settings.async_scheduling)
        ef.addRow("", self.async_scheduling)
        self.kv_cache_type = QComboBox()
        for key in KV_CACHE_TYPES:
            self.kv_cache_type.addItem(KV_CACHE_LABELS.get(key, key), key)
        self.kv_cache_type.setCurrentIndex(self.kv_cache_type.findData(settings.kv_cache_type))
        self.kv_cache_type.setToolTip("What the GPU keeps the conversation's keys and values in. Float16 halves "
                                      "that memory (a long context fits in less) and reads long prompts faster, "
                                      "at about 3 digits per value; the CPU always keeps Float32. Applies at the "
                                      "next model load.")
        ef.addRow("KV cache precision", self.kv_cache_type)
        self.theme = QComboBox()
        for key in THEMES:
            self.theme.addItem(THEME_LABELS[key], key)
        self.theme.setCurrentIndex(THEMES.index(settings.theme))
        ef.addRow("Theme", self.theme)
        col.addWidget(engine)

        folders = QGroupBox("Model folders")
        fl = QVBoxLayout(folders)
        note = QLabel(f"Always scanned: {models_dir()}")
        note.setObjectName("Muted")
        note.setWordWrap(True)
        fl.addWidget(note)
        self.folders = QListWidget()
        self.folders.addItems(settings.model_folders)
        self.folders.setFixedHeight(80)
        fl.addWidget(self.folders)
        row = QHBoxLayout()
        add = QPushButton("Add folder…")
        add.clicked.connect(self._add_folder)
        remove = QPushButton("Remove")
        remove.clicked.connect(lambda: self.folders.takeItem(self.folders.currentRow()))
        row.addWidget(add)
        row.addWidget(remove)
        row.addStretch(1)
        fl.addLayout(row)
        col.addWidget(folders)

        sampling = QGroupBox("Defaults for new conversations")
        sl = QVBoxLayout(sampling)
        sl.addWidget(QLabel("System prompt"))
        self.system_prompt = QPlainTextEdit(settings.system_prompt)
        self.system_prompt.setFixedHeight(60)
        self.system_prompt.setTabChangesFocus(True)     # Tab goes on to the next control, as in Windows dialogs
        sl.addWidget(self.system_prompt)
        self.sampling = SamplingForm(settings.sampling)
        sl.addWidget(self.sampling)
        col.addWidget(sampling)

        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        buttons.setContentsMargins(12, 0, 12, 0)
        self.scroll = make_scrollable(self, content, buttons)     # all of it reachable on a 1366x768 screen

    def add_folder(self, folder: str) -> None:
        if folder and not self.folders.findItems(folder, Qt.MatchFlag.MatchExactly):
            self.folders.addItem(folder)

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        self.add_folder(folder)

    def apply(self) -> None:
        s = self.settings
        s.backend = self.backend.currentData()
        s.async_scheduling = self.async_scheduling.isChecked()
        s.kv_cache_type = self.kv_cache_type.currentData()
        s.theme = self.theme.currentData()
        s.model_folders = [self.folders.item(i).text() for i in range(self.folders.count())]
        s.system_prompt = self.system_prompt.toPlainText()
        s.sampling = self.sampling.value()
        s.sync()
