"""Discover: find GGUF models on the Hugging Face Hub, see what fits, download them into the library.

`DiscoverActions` runs every hub call on a worker thread (engine.hub: search, file listing, remote
headers, fit verdicts, the download queue) and turns the answers into signals on the GUI thread; the page
(app.widgets.discover_page) only shows them. Downloads also show in the status bar, and a finished one
makes the library rescan, so the model is there to load.
"""
from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QDialog, QLabel, QPushButton, QVBoxLayout, QWidget

from app.widgets.discover_page import DiscoverPage, download_words
from engine.errors import EngineError
from engine.paths import data_dir, models_dir

if TYPE_CHECKING:
    from app.library import LoadTarget
    from engine.hub import DownloadManager, DownloadState, HubClient, Machine, Verdict

log = logging.getLogger(__name__)
JOURNAL_NAME = "hub-downloads.json"        # unfinished downloads (engine.hub.download's journal)
# engine.hub (huggingface_hub, ~0.6 s to import) is imported on first use, never at the app's start.


class DiscoverActions(QObject):
    searched = Signal(list)              # [RepoSummary]
    listed = Signal(str, list)           # repo id, [QuantGroup]
    judged = Signal(str, object)         # file name, Verdict
    failed = Signal(str, bool)           # one sentence for the user; True: the hub is unreachable (Retry)
    downloadChanged = Signal(object)     # DownloadState
    downloaded = Signal(str)             # the path of a verified model now in the models folder

    def __init__(self, parent: QObject | None = None, folder: Path | None = None, machine: Machine | None = None,
                 endpoint: str | None = None, on_downloaded: Callable[[str], None] | None = None,
                 target: Callable[[], LoadTarget] | None = None):
        """`target`: what a load would be made with (ModelActions.load_target), asked for every verdict: its
        context and KV cache type are what a verdict plans (where the model runs is the verdict's to say);
        None: engine.hub's defaults."""
        super().__init__(parent)
        self.folder = folder or models_dir()
        self.machine = machine             # None: asked from the backend probe on first use
        self.endpoint = endpoint
        self.target = target
        self._repo = ""                    # the repo whose files are listed, and the (context, KV type) its
        self._judged_with: tuple[int, str] | None = None     # verdicts planned (re-judged when they change)
        self._client: HubClient | None = None
        self._manager: DownloadManager | None = None
        self.journal = data_dir() / JOURNAL_NAME
        self.status_label = QLabel()       # for the window's status bar: the running download's progress
        if unfinished := _journal_count(self.journal):
            self.status_label.setText(f"↓ {unfinished} download{'s' * (unfinished > 1)} paused: Model library > "
                                      f"Discover to resume")
        self.page: DiscoverPage | None = None
        self._dialog: QDialog | None = None
        self._retry: Callable[[], None] | None = None
        self._listing = 0                  # generation of the latest listing: late verdicts of older ones dropped
        self.downloadChanged.connect(self._on_download)
        if on_downloaded is not None:
            self.downloaded.connect(on_downloaded)

    @property
    def client(self) -> HubClient:
        if self._client is None:
            from engine.hub import HubClient
            from engine.hub.token import load_token

            self._client = HubClient(self.endpoint, load_token())
        return self._client

    @property
    def manager(self) -> DownloadManager:
        if self._manager is None:
            from engine.hub import DownloadManager

            self._manager = DownloadManager(self.folder, self.client, self.downloadChanged.emit, self.journal)
        return self._manager

    # -- hub calls (each on its own worker thread) -----------------------------------------------------
    def search(self, query: str) -> None:
        self._retry = lambda: self.search(query)
        self._run(lambda: self.searched.emit(self.client.search(query)))

    def open_repo(self, repo_id: str) -> None:
        self._retry = lambda: self.open_repo(repo_id)
        self._listing += 1
        generation = self._listing
        self._repo, self._judged_with = repo_id, self._planned_with()
        planned = self._judged_with

        def work():
            from engine.hub import group_by_quant

            groups = group_by_quant(self.client.repo_files(repo_id))
            self.listed.emit(repo_id, groups)
            for g in groups:
                if generation != self._listing:
                    return
                self.judged.emit(g.files[0].filename, self._verdict(g, planned))

        self._run(work)

    def target_changed(self) -> None:
        """The settings were applied: verdicts planned with another context or KV cache type are judged again."""
        if self._repo and self._planned_with() != self._judged_with:
            self.open_repo(self._repo)

    def _planned_with(self) -> tuple[int, str] | None:
        """(context, KV cache type) a verdict plans now, asked on the GUI thread; None: engine.hub's defaults."""
        if self.target is None:
            return None
        t = self.target()
        return t.context, t.kv_cache_type

    def _verdict(self, group, planned: tuple[int, str] | None) -> Verdict:
        from engine.hub import Verdict, current_machine, fit_verdict

        if group.split:
            return Verdict("unsupported", f"split into {len(group.files)} files: Halo Chat loads single-file GGUFs "
                                          f"only; pick another quantization")
        try:
            header = self.client.read_header(group.files[0])
            if self.machine is None:
                self.machine = current_machine()
            return fit_verdict(header, self.machine, *(planned or ()))
        except EngineError as e:
            return Verdict("unsupported", f"header unreadable: {e}")

    def download(self, group) -> None:
        try:
            if group.split:
                raise EngineError(f"{group.files[0].filename} is split into {len(group.files)} files; Halo Chat "
                                  f"loads single-file GGUFs only: pick another quantization.")
            self.manager.enqueue(group.files[0])
        except EngineError as e:
            self.failed.emit(str(e), False)

    def retry(self) -> None:
        if self._retry is not None:
            self._retry()

    def set_token(self, token: str) -> bool:
        """Keeps the token (OS keyring when there is one); True when it will survive a restart."""
        from engine.hub import HubClient
        from engine.hub.token import save_token

        kept = save_token(token)
        self._client = HubClient(self.endpoint, token.strip() or None)
        self.manager.client = self._client
        return kept

    def _run(self, work: Callable[[], None]) -> None:
        def guarded():
            try:                                         # engine.hub's first import checks HF_* variables: may raise
                from engine.hub import HubUnreachableError
            except EngineError as e:
                self.failed.emit(str(e), False)
                return
            try:
                work()
            except HubUnreachableError as e:
                self.failed.emit(str(e), True)
            except EngineError as e:
                self.failed.emit(str(e), False)
            except Exception as e:                 # a bug must show as a message, never kill the page silently
                log.exception("hub call failed")
                self.failed.emit(f"Unexpected error: {type(e).__name__}: {e}", False)

        threading.Thread(target=guarded, name="hub", daemon=True).start()

    # -- downloads -------------------------------------------------------------------------------------
    def _on_download(self, state: DownloadState) -> None:
        active = [s for s in self.manager.states() if s.status == "downloading"]
        self.status_label.setText(f"↓ {active[0].file.filename}: {download_words(active[0])}" if active else "")
        if state.status == "done" and state.path is not None:
            self.downloaded.emit(str(state.path))

    def shutdown(self) -> None:
        if self._manager is not None:
            self._manager.shutdown(timeout=5.0)

    # -- the page --------------------------------------------------------------------------------------
    def make_page(self) -> DiscoverPage:
        if self.page is None:
            try:
                from engine.hub.token import keyring_available  # engine.hub's first import checks HF_* vars

                keyring = keyring_available()
            except EngineError:            # a malformed HF_* variable: the page opens and says which
                keyring = False
            page = DiscoverPage(keyring)
            page.searchRequested.connect(self.search)
            page.repoChosen.connect(self.open_repo)
            page.downloadRequested.connect(self.download)
            # looked up at each click: the manager (and its hub client) may not exist (a malformed HF_* variable, below)
            page.pauseRequested.connect(lambda f: self.manager.pause(f))
            page.resumeRequested.connect(lambda f: self.manager.resume(f))
            page.cancelRequested.connect(lambda f: self.manager.cancel(f))
            page.retryRequested.connect(self.retry)
            page.tokenEntered.connect(lambda t: page.show_token_kept(self.set_token(t)))
            self.searched.connect(page.show_repos)
            self.listed.connect(page.show_files)
            self.judged.connect(page.show_verdict)
            self.failed.connect(page.show_error)
            self.downloadChanged.connect(page.show_download)
            self.downloaded.connect(lambda p: page.show_note(f"{Path(p).name} is in the model library."))
            self.page = page
            try:
                for state in self.manager.states():      # unfinished downloads of an earlier run, paused
                    page.show_download(state)
            except EngineError as e:                     # no hub client: an HF_* variable is malformed
                page.show_error(str(e), False)
        return self.page

    def show(self, parent: QWidget | None = None) -> None:
        if self._dialog is None:
            self._dialog = QDialog(parent)
            self._dialog.setWindowTitle("Discover models")
            self._dialog.resize(980, 640)
            QVBoxLayout(self._dialog).addWidget(self.make_page())
        self._dialog.show()
        self._dialog.raise_()

    def library_section(self) -> QWidget:
        """A row for the model library: opens the Discover page."""
        box = QWidget()
        row = QVBoxLayout(box)
        row.setContentsMargins(0, 0, 0, 0)
        button = QPushButton("Discover models on Hugging Face…")
        button.clicked.connect(lambda: self.show(box.window()))
        row.addWidget(button)
        return box



def _journal_count(journal) -> int:
    """How many unfinished downloads the journal lists (read without importing engine.hub)."""
    try:
        return len(json.loads(journal.read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return 0
