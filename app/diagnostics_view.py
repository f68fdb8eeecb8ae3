"""The Diagnostics window (Help > Diagnostics..., and "Diagnostics..." on every backend error message).

It shows a DiagnosticsReport from engine.diagnostics: the system, every backend (found or not, and why),
each device's probed facts with their raw values, the derived capabilities with their reasons, and the
backend, readback path and async scheduling mode in use and why. "Run self-test" runs
engine.diagnostics.run_self_test on a worker thread (the window keeps painting); "Copy report" puts the
Markdown on the clipboard and "Save report..." writes JSON or Markdown.

The view never touches a backend: probing and self-tests are engine.diagnostics functions run off the
GUI thread, and their records come back through a queued signal.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.diagnostics_tree import BADGE_COLORS, add_self_test, fill_tree, make_tree
from engine.diagnostics_report import DiagnosticsReport, SelfTestRun, to_markdown


class _Relay(QObject):
    """Carries a worker thread's result to the GUI thread (the signal is queued across threads)."""
    done = Signal(str, object)     # job name, result (or the exception)


class DiagnosticsView(QWidget):
    reportReady = Signal(object)         # DiagnosticsReport, after a probe finished
    selfTestFinished = Signal(object)    # SelfTestRun

    def __init__(self, client=None, parent: QWidget | None = None, report: DiagnosticsReport | None = None,
                 backend_setting: str | None = None, async_setting: bool | None = None):
        """`report`: show this report (e.g. another machine's) instead of probing this one; it can still be
        copied and saved, and the self-test then runs on this machine only if asked to."""
        super().__init__(parent)
        self.setObjectName("DiagnosticsView")
        self.setWindowTitle("Halo Chat - Diagnostics")
        self.resize(1100, 780)
        self.client = client
        settings = getattr(parent, "settings", None)
        self.backend_setting = backend_setting or getattr(client, "backend", None) or \
            getattr(settings, "backend", "auto")
        self.async_setting = async_setting if async_setting is not None else \
            bool(getattr(settings, "async_scheduling", True))
        self.report: DiagnosticsReport | None = None
        self.last_self_test: SelfTestRun | None = None
        self._relay = _Relay(self)
        self._relay.done.connect(self._on_job_done)
        self._jobs: set[str] = set()
        self._build()
        if report is not None:
            self.show_report(report)
        else:
            self.refresh()

    # -- layout -----------------------------------------------------------------------------------
    def _build(self) -> None:
        col = QVBoxLayout(self)
        col.setContentsMargins(16, 14, 16, 14)
        col.setSpacing(10)
        top = QHBoxLayout()
        title = QLabel("Diagnostics")
        title.setObjectName("ChatTitle")
        top.addWidget(title)
        top.addStretch(1)
        self.refresh_button = QPushButton("Refresh")
        self.copy_button = QPushButton("Copy report")
        self.save_button = QPushButton("Save report…")
        for b in (self.refresh_button, self.copy_button, self.save_button):
            top.addWidget(b)
        col.addLayout(top)

        self.summary = QLabel("Probing backends…")
        self.summary.setTextFormat(Qt.TextFormat.RichText)
        self.summary.setWordWrap(True)
        col.addWidget(self.summary)

        test = QHBoxLayout()
        test.addWidget(QLabel("Self-test on"))
        self.backend_combo = QComboBox()
        self.backend_combo.setMinimumWidth(160)
        test.addWidget(self.backend_combo)
        self.self_test_button = QPushButton("Run self-test")
        self.self_test_button.setObjectName("PrimaryButton")
        test.addWidget(self.self_test_button)
        self.self_test_status = QLabel("")
        self.self_test_status.setTextFormat(Qt.TextFormat.RichText)
        self.self_test_status.setWordWrap(True)
        self.self_test_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        test.addWidget(self.self_test_status, 1)
        col.addLayout(test)

        self.tree = make_tree()
        col.addWidget(self.tree, 1)

        self.refresh_button.clicked.connect(self.refresh)
        self.copy_button.clicked.connect(self.copy_report)
        self.save_button.clicked.connect(self.save_report_dialog)
        self.self_test_button.clicked.connect(self.run_self_test)
        self._set_report_actions(False)

    def _set_report_actions(self, enabled: bool) -> None:
        for b in (self.copy_button, self.save_button, self.self_test_button):
            b.setEnabled(enabled)

    # -- workers ----------------------------------------------------------------------------------
    def _start(self, job: str, fn: Callable[[], object]) -> None:
        """Runs `fn` on a worker thread; its result arrives in `_on_job_done` on the GUI thread."""
        self._jobs.add(job)

        def work():
            try:
                result = fn()
            except Exception as e:   # noqa: BLE001 - engine.diagnostics never raises; this is a last guard
                result = e
            try:
                self._relay.done.emit(job, result)
            except RuntimeError:     # the window was closed and deleted while the job ran
                pass

        threading.Thread(target=work, name=f"diagnostics-{job}", daemon=True).start()

    @property
    def busy(self) -> bool:
        return bool(self._jobs)

    def _on_job_done(self, job: str, result) -> None:
        self._jobs.discard(job)
        if job == "probe":
            self.refresh_button.setEnabled(True)
            if isinstance(result, Exception):
                self.summary.setText(f"<b>Probing failed:</b> {type(result).__name__}: {result}")
                return
            result.kv_cache_type = loaded_kv_cache_type(self.client)      # this machine's: what the view shows
            self.show_report(result)
            self.reportReady.emit(result)
        elif job == "self-test":
            self.refresh_button.setEnabled(True)
            self.self_test_button.setEnabled(True)
            self.self_test_button.setText("Run self-test")
            if isinstance(result, Exception):
                self.self_test_status.setText(_badge("ERROR", "bad") + f" {type(result).__name__}: {result}")
                return
            self.show_self_test(result)
            self.selfTestFinished.emit(result)

    # -- probing and showing ------------------------------------------------------------------------
    def refresh(self) -> None:
        if "probe" in self._jobs:
            return
        self.refresh_button.setEnabled(False)
        self.summary.setText("Probing backends…")
        backend, async_setting = self.backend_setting, self.async_setting

        def probe():
            from engine.diagnostics import collect
            return collect(backend, async_setting)

        self._start("probe", probe)

    def show_report(self, report: DiagnosticsReport) -> None:
        self.report = report
        fill_tree(self.tree, report)
        self.summary.setText(_running_html(self.client) + _summary_html(report))
        current = self.backend_combo.currentText()
        self.backend_combo.clear()
        for p in report.probes:
            self.backend_combo.addItem(p.backend)
        wanted = current if current and self.backend_combo.findText(current) >= 0 else report.selected_backend
        if wanted:
            self.backend_combo.setCurrentText(wanted)
        self._set_report_actions(True)
        if report.self_test is not None:
            self.show_self_test(report.self_test, add_to_tree=False)

    def model_path(self) -> str | None:
        model = getattr(self.client, "model", None)
        return getattr(model, "path", None) or None

    def run_self_test(self) -> None:
        if "self-test" in self._jobs or self.report is None:
            return
        backend = self.backend_combo.currentText() or self.report.selected_backend or "cpu"
        model_path = self.model_path()
        self.self_test_button.setEnabled(False)
        self.refresh_button.setEnabled(False)
        self.self_test_button.setText("Running…")
        self.self_test_status.setText(_badge("RUNNING", "info") + f" self-test on {backend}…")

        def test():
            from engine.diagnostics import run_self_test
            return run_self_test(backend, model_path)

        self._start("self-test", test)

    def show_self_test(self, run: SelfTestRun, add_to_tree: bool = True) -> None:
        self.last_self_test = run
        st = run.readback
        text = _badge("PASSED", "ok") if run.passed else _badge("FAILED", "bad")
        text += f" <b>{run.backend}</b> via {st.readback_path or 'no path'}"
        if st.step_us_median is not None:
            text += f": {st.steps} steps × {st.ids_per_step} ids, {st.mismatches} mismatches, " \
                    f"{st.step_us_median:.2f} µs/step median"
        text += f", {run.seconds:.3f} s"
        if st.error:
            text += f"<br><span style='color:{BADGE_COLORS['bad'][0]}'>{_esc(st.error)}</span>"
        if run.logits is not None:
            text += f"<br>GPU vs CPU logits: {_esc(run.logits.reason)}"
        self.self_test_status.setText(text)
        if self.report is not None and add_to_tree:
            self.report.self_test = run
            self.tree.takeTopLevelItem(_index_of_self_test(self.tree))
            item = add_self_test(self.tree, run)
            self.tree.takeTopLevelItem(self.tree.indexOfTopLevelItem(item))
            self.tree.insertTopLevelItem(2, item)     # after System and In use
            self.tree.expandItem(item)

    # -- report out ---------------------------------------------------------------------------------
    def markdown(self) -> str:
        return to_markdown(self.report) if self.report is not None else ""

    def copy_report(self) -> None:
        if self.report is not None:
            QApplication.clipboard().setText(self.markdown())
            self.copy_button.setText("Copied")

    def save_report(self, path: str | Path) -> Path:
        """Writes JSON for a .json path, Markdown otherwise."""
        path = Path(path)
        text = self.report.to_json() if path.suffix.lower() == ".json" else self.markdown()
        path.write_text(text, encoding="utf-8")
        return path

    def save_report_dialog(self) -> None:
        if self.report is None:
            return
        name = f"halo-chat-diagnostics-{self.report.created[:10]}"
        path, chosen = QFileDialog.getSaveFileName(self, "Save diagnostics report", str(Path.home() / name),
                                                   "JSON report (*.json);;Markdown report (*.md)")
        if not path:
            return
        if not Path(path).suffix:
            path += ".json" if "json" in chosen.lower() else ".md"
        try:
            self.save_report(path)
        except OSError as e:
            QMessageBox.warning(self, "Save report", f"Could not write {path}: {e}")


def _esc(text: str) -> str:
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _badge(text: str, kind: str) -> str:
    fill, fg = BADGE_COLORS[kind]
    return (f"<span style='background:{fill}; color:{fg}; font-weight:600;'>&nbsp;{_esc(text)}&nbsp;</span>")


def loaded_kv_cache_type(client) -> str:
    """The loaded model's KV cache type as loaded (ModelInfo.kv_cache_type), "" with none: the summary line
    shows it and the saved report records it."""
    return getattr(getattr(client, "model", None), "kv_cache_type", "") or ""


def _running_html(client) -> str:
    """What the loaded model really runs on (a fallback included), before what the probes would pick."""
    from app.backend_notice import BACKEND_NAMES, running_backend

    backend, reason = running_backend(client)
    if not backend:
        return ""
    kind = "warn" if backend.startswith("cpu") and getattr(client, "backend", "") in BACKEND_NAMES else "ok"
    kv = loaded_kv_cache_type(client)
    kv_html = f" KV cache {_badge(kv, 'info')}" if kv else ""
    model = getattr(client, "model", None)
    steps, note = getattr(model, "prefill_chunk", 0), getattr(model, "prefill_note", "")
    steps_html = (f" prompt steps {_badge(f'{steps:,} tokens', 'warn' if note else 'info')}"
                  + (f" <span>({_esc(note)})</span>" if note else "")) if steps else ""
    return f"Running now {_badge(backend, kind)}{kv_html}{steps_html} &nbsp; <span>{_esc(reason)}</span><br>"


def _summary_html(r: DiagnosticsReport) -> str:
    backend = _badge(r.selected_backend or "no backend", "ok" if r.selected_backend else "bad")
    path = _badge(r.readback_path, "bad" if r.readback_path == "none" else "ok")
    async_kind = "ok" if r.async_scheduling else ("warn" if ("Settings" in r.async_reason or "HALO_" in r.async_reason)
                                                  else "bad")
    mode = _badge("async scheduling " + ("on" if r.async_scheduling else "off"), async_kind)
    found = ", ".join(p.backend for p in r.probes if p.available) or "none"
    return (f"Backend {backend} &nbsp; readback {path} &nbsp; {mode}<br>"
            f"<span>{_esc(r.system.os)} · {_esc(r.system.cpu)} · available backends: {_esc(found)}</span>")


def _index_of_self_test(tree) -> int:
    for i in range(tree.topLevelItemCount()):
        if tree.topLevelItem(i).text(0).startswith("Self-test"):
            return i
    return -1
