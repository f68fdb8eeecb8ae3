"""The window's model actions: library dialog, open / drop a file, load with progress and cancel,
the starter model on first run, and engine errors shown as a banner with what to do."""
from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from app.backend_notice import BackendFallbackNotice
from app.error_messages import OVERFLOW_WAY_OUT, describe
from app.library import LoadTarget, ModelEntry, human_size, library_folders
from app.starter_download import StarterDownload
from app.widgets.library_dialog import LibraryDialog
from engine import model_store


class ModelActions(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.library_dialog: LibraryDialog | None = None
        self._pending_path = ""
        self.backend_notice = BackendFallbackNotice(window)
        self.starter_download = StarterDownload(self, window)
        c = window.client
        c.loadStarted.connect(self._on_load_started)
        c.loadProgress.connect(window.load_bar.set_progress)
        c.loaded.connect(self._on_loaded)
        c.loadFailed.connect(self._on_load_failed)
        c.loadCancelled.connect(self._on_load_cancelled)
        window.load_bar.cancelRequested.connect(c.cancel_load)
        window.library.inspected.connect(self._on_inspected)
        window.library.scanned.connect(self._on_scanned)
        window.status.update_engine(window)

    # -- library ----------------------------------------------------------------------------------
    def load_target(self) -> LoadTarget:
        """What the next load is made with, asked now: the settings may have changed since the last call."""
        s = self.w.settings
        return LoadTarget("cpu" if self.running_on_cpu() else "gpu", s.sampling.context_length, s.kv_cache_type)

    def target_changed(self) -> None:
        """Settings were applied, or a model loaded (perhaps on the CPU): an open library re-shows its estimate."""
        if self.library_dialog is not None:
            self.library_dialog.refresh_estimate()

    def show_library(self) -> None:
        if self.library_dialog is None:
            dlg = LibraryDialog(self.load_target, self.w)
            dlg.loadRequested.connect(self._load_from_library)
            dlg.openRequested.connect(self.open_path)
            dlg.addFolderRequested.connect(self._add_folder)
            dlg.refreshRequested.connect(lambda: self.w.library.scan(self.w.settings.model_folders))
            dlg.add_section(self.w.remote.library_section())     # servers' models beside the files
            dlg.add_section(self.w.discover.library_section())   # the hub: search and download
            self.library_dialog = dlg
        self.library_dialog.set_entries(self.w.library.entries, self._loaded_path())
        self.w.library.scan(self.w.settings.model_folders)
        self.library_dialog.show()
        self.library_dialog.raise_()

    def _on_scanned(self, entries: list[ModelEntry]) -> None:
        if self.library_dialog is not None:
            self.library_dialog.set_entries(entries, self._loaded_path())

    def _add_folder(self, folder: str) -> None:
        self.w.settings.model_folders = [*self.w.settings.model_folders, folder]
        self.w.library.scan(self.w.settings.model_folders)

    def _load_from_library(self, path: str) -> None:
        if self.library_dialog is not None:
            self.library_dialog.accept()
        self.open_path(path)

    def _loaded_path(self) -> str:
        return self.w.client.model.path if self.w.client.model else ""

    # -- opening a file ---------------------------------------------------------------------------
    def open_file_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.w, "Open a GGUF model", "", "GGUF models (*.gguf);;All files (*)")
        if path:
            self.open_path(path)

    def open_path(self, path: str) -> None:
        """Reads the header off the GUI thread, then loads the model or says why it cannot."""
        self._pending_path = str(path)
        self.w.status.flash(f"Reading {Path(path).name}…")
        self.w.library.inspect(str(path))

    def _on_inspected(self, entry: ModelEntry) -> None:
        if str(entry.path) != self._pending_path:
            return
        self._pending_path = ""
        self.w.status.flash("")
        if not entry.ok:
            self.w.show_banner(f"Cannot open {entry.path.name}", f"{entry.error}\n\nPick another GGUF file. "
                               "Your conversations and the loaded model are unchanged.")
            return
        self.load(entry)

    def load(self, entry: ModelEntry) -> None:
        t = self.load_target()
        self._loading_entry = entry
        self.w.load_bar.start(entry.display_name, human_size(entry.memory_estimate(t.context, t.backend,
                                                                                   t.kv_cache_type)))
        self.w.client.load(entry.path, t.context)

    def model_chosen(self) -> bool:
        """A model is loaded, loading, being read for a load, or the starter model is on its way: what start-up
        must not replace with the model used last time."""
        c = self.w.client
        return bool(self._pending_path) or c.is_loading or c.model is not None or self.starter_download.fetcher is not None

    def load_path_now(self, path: str) -> None:
        """For --model and tests: inspect on the calling thread (header only), then load."""
        self._pending_path = str(path)
        self._on_inspected(self.w.library._inspect_one(Path(path)))

    def unload(self) -> None:
        self.w.client.unload()
        self._after_model_change()

    # -- engine callbacks -------------------------------------------------------------------------
    def _on_load_started(self, path: str) -> None:
        self.w.model_button.setText(f"Loading {Path(path).stem}…")

    def _on_loaded(self, info) -> None:
        self.w.load_bar.hide()
        self.w.settings.last_model = info.path
        self._remember_file(info.path)
        if self.w.banner.isVisible():
            self.w.banner.hide()
            self.w._sync_banner_holder()
        self.w.status.flash(f"Loaded {info.name}")
        if getattr(info, "template_notice", ""):
            self.w.show_banner("Chat format replaced", info.template_notice)
        self.backend_notice.check()
        self._after_model_change()

    def _remember_file(self, path: str) -> None:
        """A file opened or dropped from outside the library's folders joins the library (as it says)."""
        folders = {os.path.normcase(os.path.abspath(f)) for f in library_folders(self.w.settings.model_folders)}
        in_folder = os.path.normcase(os.path.dirname(os.path.abspath(path))) in folders
        if not in_folder and path not in self.w.settings.model_files:
            self.w.settings.model_files = [*self.w.settings.model_files, path]
            self.w.library.scan(self.w.settings.model_folders)

    def explain_missing_last_model(self, path: str, entry: ModelEntry | None) -> None:
        """At start: the model used last time cannot be loaded; say which and why instead of 'No model'."""
        why = entry.error if entry is not None and entry.error else "it is no longer there (moved or deleted)"
        self.w.show_banner("The model you used last time cannot be loaded",
                           f"{Path(path).name} ({path}): {why}.\n\nLoad another model from the library, "
                           "or open the file where it is now.",
                           (("Model library…", self.show_library), ("Open GGUF…", self.open_file_dialog)))

    def _on_load_failed(self, path: str, error: Exception) -> None:
        self.w.load_bar.hide()
        msg = describe(error, Path(path).name)
        actions = []
        if msg.offer_cpu and not self.running_on_cpu():
            actions.append(("Continue on CPU", lambda: self.continue_on_cpu(path)))
        if msg.offer_diagnostics:
            actions.append(("Diagnostics…", self.w.open_diagnostics))
        self.w.show_banner(msg.title, msg.body, tuple(actions))
        self._after_model_change()

    def _on_load_cancelled(self, path: str) -> None:
        self.w.load_bar.hide()
        self.w.status.flash(f"Loading {Path(path).name} was cancelled")
        self._after_model_change()

    def show_current_model(self) -> None:
        """The model button and the status bar name what new replies use (a local or a server's model)."""
        self._after_model_change()

    def _after_model_change(self) -> None:
        info = self.w.chat.model
        self.w.model_button.setText(f"{info.name}  ▾" if info else "Load a model  ▾")
        self.w.status.update_engine(self.w)
        self.w.status.update_context(self.w)
        self.target_changed()

    # -- errors and fallbacks ---------------------------------------------------------------------
    def running_on_cpu(self) -> bool:
        """True when "Continue on CPU" would change nothing: the setting, or the loaded model, is the CPU."""
        info = self.w.client.model
        return self.w.client.backend == "cpu" or (info is not None and info.backend == "cpu")

    def continue_on_cpu(self, path: str | None = None) -> None:
        path = path or self._loaded_path() or self.w.settings.last_model
        self.w.client.reconfigure("cpu", self.w.settings.async_scheduling)
        if path:
            self.open_path(path)

    def reconfigure_engine(self) -> None:
        path = self._loaded_path()
        s = self.w.settings
        self.w.client.reconfigure(s.backend, s.async_scheduling, s.kv_cache_type)
        if path:
            self.open_path(path)

    def offer_reload_for_context(self) -> None:
        """The context setting is what a load allocates: a loaded model whose context it would change is offered a
        reload (the chats stay; a reply being written is stopped by it), else it keeps its context until the next
        load. Servers' models are not ours to reload."""
        info = self.w.client.model
        if info is None or info.backend.startswith("server:") or self.w.client.is_loading:
            return
        wanted = min(self.w.settings.sampling.context_length, info.context_length)
        if wanted == info.max_context:
            return
        self.w.show_banner("The new context length applies when the model loads again",
                           f"{info.name} holds {info.max_context:,} tokens as loaded; the setting gives it "
                           f"{wanted:,}. Reload it now, or it keeps its context until the next load.",
                           (("Reload now", lambda: self.open_path(info.path)),))

    def show_generation_error(self, error: str, error_type: str = "") -> None:
        info = self.w.chat.model
        if error_type == "ContextOverflowError":
            self.w.show_banner("This chat no longer fits the context", f"{error}\n\n{OVERFLOW_WAY_OUT}",
                               (("Chat settings…", self.w.open_conversation_settings),))
            return
        if info is not None and info.backend.startswith("server:"):
            self.w.show_banner("The server's reply failed", f"{error}\n\nYour conversation is saved; try again, "
                               "or pick another model in the model library.",
                               (("Model library…", self.show_library),))
            return
        actions = [("Diagnostics…", self.w.open_diagnostics)]
        if not self.running_on_cpu():
            actions.insert(0, ("Continue on CPU", self.continue_on_cpu))
        self.w.show_banner("The reply failed", f"{error}\n\nYour conversation is saved; try again, or continue "
                           "on the CPU if the GPU is at fault.", tuple(actions))

    def explain_no_model(self) -> None:
        starter = model_store.find_local(model_store.STARTER)
        if self.w.library.entries or starter:
            self.w.show_banner("No model is loaded", "Load a model from the library to start chatting.",
                               (("Model library…", self.show_library),))
        else:
            self.offer_starter()

    def offer_starter(self) -> None:
        size = human_size(model_store.STARTER.size)
        self.w.show_banner("Welcome to Halo Chat", f"You have no models yet. Download the starter model, a small "
                           f"chat model ({model_store.STARTER.filename}, {size}) that runs on any computer, or "
                           "open a GGUF file you already have.",
                           ((f"Download starter model ({size})", self.fetch_starter),
                            ("Open GGUF…", self.open_file_dialog)))

    def fetch_starter(self) -> None:
        self.starter_download.start()
