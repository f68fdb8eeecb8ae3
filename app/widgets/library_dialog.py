"""The model library: every GGUF in the models folders with what it is, a memory estimate, and Load."""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
)

from app.library import LoadTarget, ModelEntry, human_size
from engine.model.arch import kv_cache_type

COLUMNS = ("Name", "Architecture", "Size", "Quantization", "Context", "File")
PATH_ROLE = Qt.ItemDataRole.UserRole


class LibraryDialog(QDialog):
    loadRequested = Signal(str)        # path
    openRequested = Signal(str)        # a file chosen with "Open GGUF…" (the window inspects and loads it)
    addFolderRequested = Signal(str)
    refreshRequested = Signal()

    def __init__(self, target: Callable[[], LoadTarget], parent=None):
        """`target`: what a load would be made with, asked each time an estimate is shown (never kept: the
        settings change while the dialog lives)."""
        super().__init__(parent)
        self.setWindowTitle("Model library")
        self.resize(860, 420)
        self._target = target
        self._entries: dict[str, ModelEntry] = {}
        col = QVBoxLayout(self)
        intro = QLabel("GGUF models in your model folders. Drop a .gguf file on the main window to add it.")
        intro.setObjectName("Muted")
        col.addWidget(intro)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setTabKeyNavigation(False)       # its cells are not edited: Tab goes on to the buttons
        self.table.verticalHeader().hide()
        self.table.setShowGrid(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for i in range(1, len(COLUMNS)):
            header.setSectionResizeMode(i, QHeaderView.ResizeMode.ResizeToContents)
        self.table.itemSelectionChanged.connect(self.refresh_estimate)
        self.table.activated.connect(lambda _index: self._load())      # a double click, or Enter
        col.addWidget(self.table, 1)
        self.estimate = QLabel(" ")
        self.estimate.setWordWrap(True)
        col.addWidget(self.estimate)
        self._sections = col          # add_section puts more model sources (servers) here
        row = QHBoxLayout()
        open_button = QPushButton("Open GGUF…")
        open_button.clicked.connect(self._open_file)
        add_folder = QPushButton("Add folder…")
        add_folder.clicked.connect(self._add_folder)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refreshRequested)
        row.addWidget(open_button)
        row.addWidget(add_folder)
        row.addWidget(self.refresh_button)
        row.addStretch(1)
        self.load_button = QPushButton("Load")
        self.load_button.setObjectName("Primary")
        self.load_button.setEnabled(False)
        self.load_button.clicked.connect(self._load)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        row.addWidget(self.load_button)
        row.addWidget(close)
        col.addLayout(row)

    def keyPressEvent(self, event) -> None:   # noqa: N802 - Qt's name
        """Enter acts where the focus is: a list's row (its `activated`: Load, Chat with this model) or the focused
        button. It never reaches a default button, which a QDialog picks by itself (here Open GGUF…)."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            event.accept()
            return
        super().keyPressEvent(event)

    def add_section(self, widget) -> None:
        """Another source of models shown beside the local files (app/remote_models.py's servers)."""
        self._sections.insertWidget(self._sections.count() - 1, widget)

    def set_entries(self, entries: list[ModelEntry], loaded_path: str = "") -> None:
        """Shows `entries`, keeping the user's selection: rescans (Refresh, a folder added, a download done)
        arrive while they pick, and Load must load the row they picked, not the first one."""
        chosen = self.selected_entry()
        self._entries = {str(e.path): e for e in entries}
        self.table.setRowCount(len(entries))
        for r, e in enumerate(entries):
            if e.ok:
                cells = (e.display_name, e.architecture, human_size(e.file_size), e.quantization,
                         f"{e.context_length:,}" if e.context_length else "?", e.path.name)
            else:
                cells = (e.path.stem, "unreadable", human_size(e.file_size), "", "", e.path.name)
            for c, text in enumerate(cells):
                item = QTableWidgetItem(("● " if str(e.path) == loaded_path and c == 0 else "") + text)
                item.setData(PATH_ROLE, str(e.path))
                item.setToolTip(e.error or str(e.path))
                if not e.ok:
                    item.setForeground(self.palette().placeholderText())
                self.table.setItem(r, c, item)
        if chosen is not None and str(chosen.path) in self._entries:
            self.select_path(str(chosen.path))
        elif entries:
            self.table.selectRow(0)
        self.refresh_estimate()

    def selected_entry(self) -> ModelEntry | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            return None
        return self._entries.get(self.table.item(rows[0].row(), 0).data(PATH_ROLE))

    def select_path(self, path: str) -> None:
        for r in range(self.table.rowCount()):
            if self.table.item(r, 0).data(PATH_ROLE) == path:
                self.table.selectRow(r)

    def refresh_estimate(self) -> None:
        """The selected model's cost for the load target as of now (the window calls it when settings change)."""
        e = self.selected_entry()
        self.load_button.setEnabled(bool(e and e.ok))
        if e is None:
            self.estimate.setText(" ")
        elif not e.ok:
            self.estimate.setText(f"<b>This file cannot be used.</b> {_html(e.error)}")
        else:
            t = self._target()
            ctx = min(t.context, e.context_length) if e.context_length else t.context
            est = e.estimate(t.context, t.backend, t.kv_cache_type)
            weights = est.weights if est else (e.weight_bytes or e.file_size)
            kv = est.kv_cache + est.recurrent_state if est else e.kv_cache_bytes(ctx)
            total = est.total if est else e.memory_estimate(t.context, t.backend, t.kv_cache_type)
            kv_type = kv_cache_type(t.kv_cache_type, t.backend)
            self.estimate.setText(
                f"Loading needs about <b>{human_size(total)}</b>: "
                f"weights {human_size(weights)} + KV cache {human_size(kv)} ({kv_type}) "
                f"for {ctx:,} tokens of context."
                + ("" if e.has_chat_template else " No chat template: plain completion mode."))

    def _load(self) -> None:
        e = self.selected_entry()
        if e and e.ok:
            self.loadRequested.emit(str(e.path))

    def _open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.openRequested.emit(path)

    def _add_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a model folder")
        if folder:
            self.addFolderRequested.emit(str(Path(folder)))


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
