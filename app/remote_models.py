"""Remote OpenAI-compatible servers as a model source: "Add a server…" in the model library, their models
listed beside the local files, and the chosen one answering through the same chat view, history and stop
button (app/remote_client.py does the talking).

The servers the user added (address and optional key) are kept in the app's settings, so they are there
at the next start; a server that cannot be reached stays listed with the reason, ready for Refresh.
"""
from __future__ import annotations

import json

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.remote_api import RemoteError, RemoteServer, normalize_base_url
from app.remote_client import ModelLister, RemoteChatClient, RemoteModel
from engine.keychain import forget_secret, load_secret, save_secret

SETTINGS_KEY = "servers/remote"          # JSON list of {"url": ...}; keys live in the OS keyring, never here
ITEM_ROLE = Qt.ItemDataRole.UserRole


def _key_account(base_url: str) -> str:
    return f"server-key:{base_url}"


def saved_servers(q) -> list[RemoteServer]:
    try:
        data = json.loads(str(q.value(SETTINGS_KEY, "[]")))
        servers = []
        for d in data:
            url = normalize_base_url(d["url"])
            if d.get("key"):                 # written by an older version in plain text: move it to the keyring
                save_secret(_key_account(url), str(d["key"]))
            servers.append(RemoteServer(url, load_secret(_key_account(url)) or ""))
    except (ValueError, KeyError, TypeError, RemoteError):
        return []                        # a damaged entry must not stop the app; the user adds it again
    if any(d.get("key") for d in data):
        save_servers(q, servers)
    return servers


def _listed_urls(q) -> set[str]:
    """The server addresses the settings list; none where the entry is damaged."""
    try:
        return {d["url"] for d in json.loads(str(q.value(SETTINGS_KEY, "[]")))}
    except (ValueError, KeyError, TypeError):
        return set()


def save_servers(q, servers: list[RemoteServer]) -> None:
    for url in _listed_urls(q) - {s.base_url for s in servers}:          # a removed server's key goes too
        forget_secret(_key_account(url))
    for s in servers:
        save_secret(_key_account(s.base_url), s.api_key)
    q.setValue(SETTINGS_KEY, json.dumps([{"url": s.base_url} for s in servers]))


def forget_server_keys(q) -> None:
    """Removes every listed server's key from the keyring; the list itself stays (the uninstaller's purge)."""
    for url in _listed_urls(q):
        forget_secret(_key_account(url))


class AddServerDialog(QDialog):
    """Base URL and optional key. A bad address is explained here and the dialog stays open with what was
    typed; reachability is checked after adding (the list says why a server cannot be used)."""

    def __init__(self, parent=None):
        super().__init__(parent)
        self.setWindowTitle("Add a server")
        self.server: RemoteServer | None = None
        col = QVBoxLayout(self)
        intro = QLabel("An OpenAI-compatible server: vLLM, llama-server, LM Studio, Ollama, or another Halo "
                       "Chat (python -m engine serve).")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        col.addWidget(intro)
        form = QFormLayout()
        self.url_edit = QLineEdit(placeholderText="http://192.168.1.20:8000/v1")
        self.key_edit = QLineEdit(placeholderText="optional")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        form.addRow("Base URL:", self.url_edit)
        form.addRow("API key:", self.key_edit)
        col.addLayout(form)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setObjectName("Error")
        self.error_label.hide()
        col.addWidget(self.error_label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Add")
        buttons.accepted.connect(self._add)
        buttons.rejected.connect(self.reject)
        self.add_button = buttons.button(QDialogButtonBox.StandardButton.Ok)
        col.addWidget(buttons)

    def _add(self) -> None:
        try:
            url = normalize_base_url(self.url_edit.text())
        except RemoteError as e:
            self.error_label.setText(str(e))
            self.error_label.show()
            return
        self.server = RemoteServer(url, self.key_edit.text().strip())
        self.accept()


class RemoteModelsBox(QWidget):
    """The servers section of the model library: servers, their models (or why not), add / use / remove."""

    addRequested = Signal()
    useRequested = Signal(object)          # RemoteModel
    removeRequested = Signal(object)       # RemoteServer
    refreshRequested = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 8, 0, 0)
        title = QLabel("Servers: models of OpenAI-compatible servers, answering through the same chat.")
        title.setObjectName("Muted")
        col.addWidget(title)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Server / model", "Status"])
        self.tree.setColumnWidth(0, 380)
        self.tree.setMinimumHeight(110)
        self.tree.itemSelectionChanged.connect(self._selection_changed)
        self.tree.activated.connect(lambda _index: self._use())        # a double click, or Enter
        col.addWidget(self.tree)
        row = QHBoxLayout()
        self.add_button = QPushButton("Add a server…")
        self.add_button.clicked.connect(self.addRequested)
        self.remove_button = QPushButton("Remove server")
        self.remove_button.clicked.connect(self._remove)
        self.refresh_button = QPushButton("Refresh servers")
        self.refresh_button.clicked.connect(self.refreshRequested)
        self.use_button = QPushButton("Chat with this model")
        self.use_button.clicked.connect(self._use)
        for b in (self.add_button, self.remove_button, self.refresh_button):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(self.use_button)
        col.addLayout(row)
        self._selection_changed()

    def set_servers(self, servers: list[RemoteServer], models: dict, errors: dict, current: RemoteModel | None):
        """`models`: server -> [RemoteModel] (listed); `errors`: server -> words; neither: being listed."""
        self.tree.clear()
        for server in servers:
            top = QTreeWidgetItem([server.base_url, ""])
            top.setData(0, ITEM_ROLE, server)
            if server in errors:
                top.setText(1, errors[server])
                top.setToolTip(1, errors[server])
            elif server in models:
                n = len(models[server])
                top.setText(1, f"{n} model{'s' if n != 1 else ''}" if n else "no models loaded there")
            else:
                top.setText(1, "asking for its models…")
            for m in models.get(server, []):
                child = QTreeWidgetItem([("● " if m == current else "") + m.model_id, m.server.label])
                child.setData(0, ITEM_ROLE, m)
                top.addChild(child)
            self.tree.addTopLevelItem(top)
            top.setExpanded(True)
        self._selection_changed()

    def model_items(self) -> list[QTreeWidgetItem]:
        tops = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        return [t.child(j) for t in tops for j in range(t.childCount())]

    def status_of(self, base_url: str) -> str:
        for i in range(self.tree.topLevelItemCount()):
            item = self.tree.topLevelItem(i)
            if item.text(0) == base_url:
                return item.text(1)
        return ""

    def _selected(self):
        items = self.tree.selectedItems()
        return items[0].data(0, ITEM_ROLE) if items else None

    def _selection_changed(self) -> None:
        chosen = self._selected()
        self.use_button.setEnabled(isinstance(chosen, RemoteModel))
        self.remove_button.setEnabled(chosen is not None)

    def _use(self) -> None:
        chosen = self._selected()
        if isinstance(chosen, RemoteModel):
            self.useRequested.emit(chosen)

    def _remove(self) -> None:
        """Asks first (default: Cancel): removing also forgets the server's key, which the user may not have
        written down anywhere else."""
        chosen = self._selected()
        if chosen is None:
            return
        server = chosen.server if isinstance(chosen, RemoteModel) else chosen
        answer = QMessageBox.question(self, "Remove server", f"Remove {server.base_url} from your servers?\n\n"
                                      "Its API key, if you entered one, is deleted from this computer too.",
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                                      QMessageBox.StandardButton.Cancel)
        if answer == QMessageBox.StandardButton.Yes:
            self.removeRequested.emit(server)


class RemoteActions(QObject):
    """The window's servers: kept in settings, listed off the GUI thread, chosen as the chat's source."""

    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.client = RemoteChatClient(self)
        self.servers: list[RemoteServer] = saved_servers(window.settings.q)
        self.models: dict[RemoteServer, list[RemoteModel]] = {}
        self.errors: dict[RemoteServer, str] = {}
        self.box: RemoteModelsBox | None = None
        self.add_dialog: AddServerDialog | None = None
        self.lister = ModelLister(self)
        self.lister.listed.connect(self._on_listed)
        self.lister.failed.connect(self._on_failed)

    # -- the library section ----------------------------------------------------------------------
    def library_section(self) -> RemoteModelsBox:
        """The servers section for the model library (made once; listing starts when it is first shown)."""
        if self.box is None:
            self.box = RemoteModelsBox()
            self.box.addRequested.connect(self.ask_for_server)
            self.box.useRequested.connect(self.use)
            self.box.removeRequested.connect(self.remove)
            self.box.refreshRequested.connect(self.refresh)
            self.refresh()
        return self.box

    def _show(self) -> None:
        if self.box is not None:
            current = self.client.remote if self.w.chat.source is self.client else None
            self.box.set_servers(self.servers, self.models, self.errors, current)

    def refresh(self) -> None:
        self.models.clear()
        self.errors.clear()
        for server in self.servers:
            self.lister.list(server)
        self._show()

    # -- adding and removing ----------------------------------------------------------------------
    def ask_for_server(self) -> None:
        dlg = AddServerDialog(self.box.window() if self.box else self.w)
        dlg.accepted.connect(lambda: self.add(dlg.server))
        self.add_dialog = dlg
        dlg.open()

    def add(self, server: RemoteServer) -> None:
        self.servers = [s for s in self.servers if s.base_url != server.base_url] + [server]
        save_servers(self.w.settings.q, self.servers)
        self.models.pop(server, None)
        self.errors.pop(server, None)
        self.lister.list(server)
        self._show()

    def remove(self, server: RemoteServer) -> None:
        self.servers = [s for s in self.servers if s != server]
        save_servers(self.w.settings.q, self.servers)
        self._show()

    def _on_listed(self, server: RemoteServer, models: list[RemoteModel]) -> None:
        if server in self.servers:
            self.models[server] = models
            self._show()

    def _on_failed(self, server: RemoteServer, words: str) -> None:
        if server in self.servers:
            self.errors[server] = words
            self._show()
            self.w.status.flash(words)

    # -- chatting ---------------------------------------------------------------------------------
    def use(self, remote: RemoteModel) -> None:
        """New replies come from `remote`; loading a local model switches back (ChatController)."""
        self.client.use(remote)
        self.w.chat.use_source(self.client)
        self.w.models.show_current_model()
        self.w.status.flash(f"Replies now come from {remote.model_id} on {remote.server.label}")
        self._show()
        if self.w.models.library_dialog is not None:
            self.w.models.library_dialog.accept()

    def shutdown(self) -> None:
        self.client.shutdown()
