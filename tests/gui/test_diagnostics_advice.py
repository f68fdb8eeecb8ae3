"""Every backend the Diagnostics view says NO to says what to do about it, in the window and in the report a
user pastes: a runtime library that is missing, a runtime that finds no device (this machine's HIP answers
hipErrorNoDevice when Debian's libamdhip64 is installed), an optional binding that is not installed."""
from __future__ import annotations

import pytest

from app.diagnostics_tree import COL_ITEM, COL_VALUE
from app.diagnostics_view import DiagnosticsView
from engine.diagnostics import collect
from engine.diagnostics_report import to_markdown

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def _backend_row(view: DiagnosticsView, backend: str):
    backends = next(view.tree.topLevelItem(i) for i in range(view.tree.topLevelItemCount())
                    if view.tree.topLevelItem(i).text(COL_ITEM) == "Backends")
    return next(backends.child(i) for i in range(backends.childCount())
                if backends.child(i).text(COL_ITEM).startswith(backend))


def test_every_unavailable_backend_says_what_to_do(qtbot):
    report = collect()
    view = DiagnosticsView(report=report)
    qtbot.addWidget(view)
    md = to_markdown(report)
    absent = [p for p in report.probes if not p.available]
    assert absent, "this test needs a machine without some GPU backend"
    for p in absent:
        assert len(p.advice) > 20, p.backend
        assert f"What to do: {p.advice}" in md
        row = _backend_row(view, p.backend)
        todo = [row.child(i) for i in range(row.childCount()) if row.child(i).text(COL_ITEM) == "What to do"]
        assert [r.text(COL_VALUE) for r in todo] == [p.advice]
    by_name = {p.backend: p for p in absent}
    if "cuda-python" in by_name and "not installed" in by_name["cuda-python"].reason:
        assert "ctypes-cuda" in by_name["cuda-python"].advice          # an optional package: nothing to install
    if "ctypes-cuda" in by_name and "not found" in by_name["ctypes-cuda"].reason:
        assert "NVIDIA" in by_name["ctypes-cuda"].advice and "driver" in by_name["ctypes-cuda"].advice
    if "ctypes-hip" in by_name and "NoDevice" in by_name["ctypes-hip"].reason:
        assert "finds no GPU" in by_name["ctypes-hip"].advice
