"""The Discover page's widgets: search, a repo's GGUF files by quantization with size, architecture and a fit
verdict, the download list with progress and pause/resume/cancel, the access token field, and one sentence
plus Retry when the hub cannot be reached. Shows what app.discover tells it; emits what the user asks."""
from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.library import human_size

if TYPE_CHECKING:
    from engine.hub import DownloadState, QuantGroup, Verdict

FILE_COLUMNS = ("Quantization", "File", "Size", "Architecture", "Fits?")
DOWNLOAD_COLUMNS = ("File", "Progress", "Status")
VERDICT_WORDS = {"gpu": "fits on the GPU", "cpu": "fits on the CPU only", "too_large": "too large",
                 "unsupported": "cannot run here"}
DATA = Qt.ItemDataRole.UserRole


def download_words(s: DownloadState) -> str:
    """"12.3 MB of 98.4 MB · 5.1 MB/s · 17 s left" (the page and the status bar say the same)."""
    text = f"{human_size(s.done)} of {human_size(s.total)}"
    if s.status == "downloading" and s.speed > 0:
        text += f" · {human_size(int(s.speed))}/s"
        if s.eta_s is not None:
            text += f" · {_duration(s.eta_s)} left"
    return text


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class DiscoverPage(QWidget):
    searchRequested = Signal(str)
    repoChosen = Signal(str)
    downloadRequested = Signal(object)     # QuantGroup
    pauseRequested = Signal(int)
    resumeRequested = Signal(int)
    cancelRequested = Signal(int)
    retryRequested = Signal()
    tokenEntered = Signal(str)

    def __init__(self, keyring_available: bool, parent=None):
        super().__init__(parent)
        self._groups: dict[str, QuantGroup] = {}          # first file name -> its group
        self._download_rows: dict[int, int] = {}          # download id -> row
        col = QVBoxLayout(self)
        row = QHBoxLayout()
        self.query = QLineEdit(placeholderText="Search GGUF models on the hub, e.g. qwen3 8b")
        self.query.returnPressed.connect(self._search)
        self.search_button = QPushButton("Search")
        self.search_button.clicked.connect(self._search)
        row.addWidget(self.query, 1)
        row.addWidget(self.search_button)
        col.addLayout(row)

        self.error_box = QWidget()
        err = QHBoxLayout(self.error_box)
        err.setContentsMargins(0, 0, 0, 0)
        self.error = QLabel(wordWrap=True)
        self.retry_button = QPushButton("Retry")
        self.retry_button.clicked.connect(self.retryRequested)
        err.addWidget(self.error, 1)
        err.addWidget(self.retry_button)
        self.error_box.hide()
        col.addWidget(self.error_box)

        split = QSplitter(Qt.Orientation.Horizontal)
        self.repos = QListWidget()
        self.repos.itemClicked.connect(lambda item: self.repoChosen.emit(item.data(DATA)))
        split.addWidget(self.repos)
        self.files = _table(FILE_COLUMNS, stretch=1)
        self.files.itemSelectionChanged.connect(self._file_selected)
        split.addWidget(self.files)
        split.setSizes([300, 680])
        col.addWidget(split, 3)
        self.verdict = QLabel(" ", wordWrap=True)
        col.addWidget(self.verdict)
        row = QHBoxLayout()
        self.download_button = QPushButton("Download", enabled=False)
        self.download_button.setObjectName("Primary")
        self.download_button.clicked.connect(self._download)
        row.addStretch(1)
        row.addWidget(self.download_button)
        col.addLayout(row)

        self.downloads = _table(DOWNLOAD_COLUMNS, stretch=0)
        self.downloads.itemSelectionChanged.connect(self._download_selected)
        col.addWidget(self.downloads, 2)
        row = QHBoxLayout()
        self.pause_button = QPushButton("Pause", enabled=False)
        self.resume_button = QPushButton("Resume", enabled=False)
        self.cancel_button = QPushButton("Cancel", enabled=False)
        for button, signal in ((self.pause_button, self.pauseRequested), (self.resume_button, self.resumeRequested),
                               (self.cancel_button, self.cancelRequested)):
            button.clicked.connect(lambda _=False, s=signal: self._selected_download() is not None
                                   and s.emit(self._selected_download()))
            row.addWidget(button)
        row.addStretch(1)
        col.addLayout(row)

        row = QHBoxLayout()
        row.addWidget(QLabel("Access token (gated models):"))
        self.token = QLineEdit(echoMode=QLineEdit.EchoMode.Password, placeholderText="hf_…")
        self.token.returnPressed.connect(lambda: self.tokenEntered.emit(self.token.text()))
        self.token_note = QLabel("saved in the system keyring" if keyring_available
                                 else "no system keyring: kept for this session only")
        self.token_note.setObjectName("Muted")
        row.addWidget(self.token, 1)
        row.addWidget(self.token_note)
        col.addLayout(row)
        self.note = QLabel(" ")
        self.note.setObjectName("Muted")
        col.addWidget(self.note)
        for button in self.findChildren(QPushButton):
            button.setAutoDefault(False)     # in a dialog, Enter in the token or search field must not click one

    # -- shown from app.discover ------------------------------------------------------------------
    def show_repos(self, repos: list) -> None:
        self.error_box.hide()
        self.repos.clear()
        for r in repos:
            item = QListWidgetItem(f"{r.repo_id}\n{r.downloads:,} downloads" + (" · gated" if r.gated else ""))
            item.setData(DATA, r.repo_id)
            self.repos.addItem(item)
        self.note.setText(f"{len(repos)} repos" if repos else "No GGUF repos match.")

    def show_files(self, repo_id: str, groups: list) -> None:
        self.error_box.hide()
        self._groups = {g.files[0].filename: g for g in groups}
        self.files.setRowCount(len(groups))
        for r, g in enumerate(groups):
            name = g.files[0].filename + (f" (+{len(g.files) - 1} parts)" if len(g.files) > 1 else "")
            for c, text in enumerate((g.quant, name, human_size(g.size), "…", "checking…")):
                item = QTableWidgetItem(text)
                item.setData(DATA, g.files[0].filename)
                self.files.setItem(r, c, item)
        self.note.setText(f"{repo_id}: {len(groups)} GGUF files" if groups else f"{repo_id} has no GGUF files.")
        self._file_selected()

    def show_verdict(self, filename: str, verdict: Verdict) -> None:
        for r in range(self.files.rowCount()):
            if self.files.item(r, 0).data(DATA) == filename:
                self.files.item(r, 3).setText(verdict.architecture or "?")
                self.files.item(r, 4).setText(VERDICT_WORDS[verdict.fit])
                for c in range(self.files.columnCount()):
                    self.files.item(r, c).setToolTip(verdict.words)
                self.files.item(r, 4).setData(DATA + 1, verdict)
        self._file_selected()

    def show_error(self, text: str, unreachable: bool) -> None:
        self.error.setText(text)
        self.retry_button.setVisible(unreachable)
        self.error_box.show()

    def show_note(self, text: str) -> None:
        self.note.setText(text)

    def show_token_kept(self, persistent: bool) -> None:
        self.token.clear()
        self.token_note.setText("token saved in the system keyring" if persistent
                                else "token kept for this session only (no system keyring)")

    def show_download(self, s: DownloadState) -> None:
        if s.id not in self._download_rows:
            self._download_rows[s.id] = self.downloads.rowCount()
            self.downloads.insertRow(self.downloads.rowCount())
            r = self._download_rows[s.id]
            item = QTableWidgetItem(s.file.filename)
            item.setData(DATA, s.id)
            self.downloads.setItem(r, 0, item)
            self.downloads.setCellWidget(r, 1, QProgressBar(maximum=1000))
            self.downloads.setItem(r, 2, QTableWidgetItem())
        r = self._download_rows[s.id]
        self.downloads.cellWidget(r, 1).setValue(int(1000 * s.done / s.total) if s.total else 0)
        words = {"downloading": download_words(s), "done": "downloaded and verified: in the library",
                 "failed": s.error}.get(s.status, f"{s.status} · {download_words(s)}")
        self.downloads.item(r, 2).setText(words)
        self.downloads.item(r, 2).setToolTip(words)
        self.downloads.item(r, 0).setData(DATA + 1, s.status)
        self._download_selected()

    # -- user actions -----------------------------------------------------------------------------
    def _search(self) -> None:
        self.searchRequested.emit(self.query.text().strip())

    def selected_group(self) -> QuantGroup | None:
        rows = self.files.selectionModel().selectedRows()
        return self._groups.get(self.files.item(rows[0].row(), 0).data(DATA)) if rows else None

    def _file_selected(self) -> None:
        g = self.selected_group()
        self.download_button.setEnabled(g is not None and not g.split)
        if g is None:
            self.verdict.setText(" ")
            return
        v = self.files.item(self.files.selectionModel().selectedRows()[0].row(), 4).data(DATA + 1)
        self.verdict.setText(v.words if v is not None else "Reading the file's header…")

    def _download(self) -> None:
        if (g := self.selected_group()) is not None:
            self.downloadRequested.emit(g)

    def _selected_download(self) -> int | None:
        rows = self.downloads.selectionModel().selectedRows()
        return self.downloads.item(rows[0].row(), 0).data(DATA) if rows else None

    def _download_selected(self) -> None:
        rows = self.downloads.selectionModel().selectedRows()
        status = self.downloads.item(rows[0].row(), 0).data(DATA + 1) if rows else None
        self.pause_button.setEnabled(status in ("queued", "downloading"))
        self.resume_button.setEnabled(status in ("paused", "failed"))
        self.cancel_button.setEnabled(status in ("queued", "downloading", "paused", "failed"))


def _table(columns: tuple[str, ...], stretch: int) -> QTableWidget:
    t = QTableWidget(0, len(columns))
    t.setHorizontalHeaderLabels(columns)
    t.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    t.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    t.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    t.verticalHeader().hide()
    t.setShowGrid(False)
    header = t.horizontalHeader()
    for i in range(len(columns)):
        header.setSectionResizeMode(i, QHeaderView.ResizeMode.Stretch if i == stretch
                                    else QHeaderView.ResizeMode.ResizeToContents)
    return t
