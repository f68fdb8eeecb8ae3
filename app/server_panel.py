"""File > Local server…: the app serves the model it has loaded over the OpenAI API (engine.server), on the
same Engine, so server requests are batched with the window's own chats.

Safety (SAFETY.md): loopback by default; the LAN is an explicit choice with a warning; an optional key.
Threads: starting and stopping the server (uvicorn in its own thread, engine.server.run.ServerThread) happen
on a worker thread and come back as signals; the request log arrives from the server's thread as a signal.
"""
from __future__ import annotations

import socket
import threading

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QSpinBox,
    QVBoxLayout,
)

from engine.errors import EngineError

LOOPBACK, ALL_INTERFACES = "127.0.0.1", "0.0.0.0"
LOG_LINES = 500
LAN_WARNING = ("⚠ Other computers on your network will be able to use this model{key}. Turn this on only on "
               "a network you trust.")


class CurrentEngine:
    """What the server talks to: the EngineClient's engine of the moment (a backend change replaces it).
    Before any model is loaded the server answers 503 "No model is loaded"."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name: str):
        engine = self._client.engine
        if engine is None:
            if name == "model_info":
                return None
            raise EngineError("No model is loaded in the app.")
        return getattr(engine, name)


def lan_address() -> str:
    """This computer's address on its network, for the panel to show (no packet is sent)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.254.254.254", 1))
            return s.getsockname()[0]
    except OSError:
        return "this computer's address"


def _tell(signal, *args) -> None:
    """Emit from a worker thread; a window closed meanwhile has nobody left to tell."""
    try:
        signal.emit(*args)
    except RuntimeError:
        pass


class LocalServer(QObject):
    """One ServerThread at a time. GUI thread only; start/stop return at once and answer with signals."""

    started = Signal(str)            # the base URL clients use
    failed = Signal(str)             # why it could not start, in words
    stopped = Signal()
    logged = Signal(str)             # one request line (emitted on the server's thread, queued to the GUI)

    def __init__(self, client, parent: QObject | None = None):
        super().__init__(parent)
        self.client = client
        self.thread = None
        self.config = None                # the engine.server.guard.ServerConfig it was started with

    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.running

    def model_id(self) -> str | None:
        """The model name clients send (as /v1/models lists it), or None."""
        return self.thread.model_server.model_id() if self.thread is not None else None

    def start(self, config) -> None:
        """`config`: an engine.server.guard.ServerConfig."""
        from engine.server.run import ServerThread  # uvicorn and starlette load when first needed

        self.config = config
        server = ServerThread(CurrentEngine(self.client), config, on_log=self.logged.emit)
        self.thread = server

        def run() -> None:
            try:
                server.start()
            except OSError as e:
                _tell(self.failed, f"The server could not start: {e}. Pick another port.")
                return
            host = lan_address() if config.host == ALL_INTERFACES else config.host
            _tell(self.started, f"http://{host}:{config.port}/v1")

        threading.Thread(target=run, name="server-start", daemon=True).start()

    def stop(self, wait: bool = False) -> None:
        server, self.thread = self.thread, None
        if server is None:
            return
        if wait:
            server.stop()
            self.stopped.emit()
            return

        def run() -> None:
            server.stop()
            _tell(self.stopped)

        threading.Thread(target=run, name="server-stop", daemon=True).start()


class LocalServerPanel(QDialog):
    """The switch, the address, port and key, the LAN choice with its warning, the status and a live log."""

    def __init__(self, server: LocalServer, settings, parent=None):
        from engine.server import DEFAULT_PORT  # the server's modules load when first needed

        super().__init__(parent)
        self.server, self.settings = server, settings
        self.setWindowTitle("Local server")
        self.resize(620, 520)
        col = QVBoxLayout(self)
        intro = QLabel("Serve the loaded model over the OpenAI API, for editors, agents and scripts on this "
                       "computer (Continue, Cline, Open WebUI, the openai Python package). Their requests share "
                       "the engine with your chats.")
        intro.setWordWrap(True)
        intro.setObjectName("Muted")
        col.addWidget(intro)
        self.switch = QCheckBox("Serve the loaded model")
        col.addWidget(self.switch)
        form = QFormLayout()
        self.port_spin = QSpinBox(minimum=1024, maximum=65535)
        self.port_spin.setValue(settings.int_value("server/port", DEFAULT_PORT))
        self.key_edit = QLineEdit(placeholderText="none: any client on this computer may call")
        self.key_edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.key_edit.setText(str(settings.q.value("server/api_key", "")))
        self.lan_check = QCheckBox("Allow other computers on my network (LAN)")
        self.lan_check.setChecked(str(settings.q.value("server/lan", "false")).lower() == "true")
        form.addRow("Port:", self.port_spin)
        form.addRow("API key:", self.key_edit)
        form.addRow("", self.lan_check)
        col.addLayout(form)
        self.lan_warning = QLabel()
        self.lan_warning.setWordWrap(True)
        self.lan_warning.setObjectName("Error")
        col.addWidget(self.lan_warning)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        col.addWidget(self.status_label)
        col.addWidget(QLabel("Requests:"))
        self.log_view = QPlainTextEdit(readOnly=True)
        self.log_view.setMaximumBlockCount(LOG_LINES)
        col.addWidget(self.log_view, 1)
        self.switch.toggled.connect(self._toggled)
        self.lan_check.toggled.connect(self._sync_warning)
        self.key_edit.textChanged.connect(self._sync_warning)
        server.started.connect(self._on_started)
        server.failed.connect(self._on_failed)
        server.stopped.connect(self._on_stopped)
        server.logged.connect(self.log_view.appendPlainText)
        self._sync_warning()
        self._set_editable(not server.running)
        self.switch.blockSignals(True)
        self.switch.setChecked(server.running)
        self.switch.blockSignals(False)
        self.status_label.setText("Running." if server.running else "Off.")

    def config(self):
        from engine.server.guard import ServerConfig

        host = ALL_INTERFACES if self.lan_check.isChecked() else LOOPBACK
        return ServerConfig(host=host, port=self.port_spin.value(), api_key=self.key_edit.text().strip() or None)

    def _sync_warning(self) -> None:
        lan = self.lan_check.isChecked()
        key = "" if self.key_edit.text().strip() else ", without a key"
        self.lan_warning.setText(LAN_WARNING.format(key=key) if lan else "")
        self.lan_warning.setVisible(lan)

    def _set_editable(self, editable: bool) -> None:
        for w in (self.port_spin, self.key_edit, self.lan_check):
            w.setEnabled(editable)

    def _toggled(self, on: bool) -> None:
        if on:
            q = self.settings.q
            q.setValue("server/port", self.port_spin.value())
            q.setValue("server/api_key", self.key_edit.text().strip())
            q.setValue("server/lan", "true" if self.lan_check.isChecked() else "false")
            self._set_editable(False)
            self.status_label.setText("Starting…")
            self.server.start(self.config())
        else:
            self.status_label.setText("Stopping…")
            self.server.stop()

    def _on_started(self, url: str) -> None:
        served = self.server.model_id()
        what = f"Serving {served}" if served else "Running, but no model is loaded: requests get HTTP 503 " \
                                                  "until you load one. Serving"
        key = " Clients must send the API key." if self.server.config and self.server.config.api_key else ""
        self.status_label.setText(f"{what} at {url}.{key}")

    def _on_failed(self, words: str) -> None:
        self.status_label.setText(words)
        self._set_editable(True)
        self.switch.blockSignals(True)
        self.switch.setChecked(False)
        self.switch.blockSignals(False)

    def _on_stopped(self) -> None:
        self.status_label.setText("Off.")
        self._set_editable(True)


class LocalServerActions(QObject):
    """The window's side: the panel on demand, a status-bar note while serving, stop at exit."""

    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.server = LocalServer(window.client, self)
        self.panel: LocalServerPanel | None = None
        self.status_note = QLabel()
        window.status.addPermanentWidget(self.status_note)
        self.status_note.hide()
        self.server.started.connect(lambda url: (self.status_note.setText(f"Server: {url}"), self.status_note.show()))
        self.server.stopped.connect(self.status_note.hide)

    def show_panel(self) -> None:
        if self.panel is None:
            self.panel = LocalServerPanel(self.server, self.w.settings, self.w)
        self.panel.show()
        self.panel.raise_()

    def stop(self) -> None:
        """At exit: blocks until the server has stopped (before the engine shuts down)."""
        self.server.stop(wait=True)
