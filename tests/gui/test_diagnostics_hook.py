"""Help > Diagnostics… opens the diagnostics view (app/diagnostics_view.py) as its own window."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def test_diagnostics_menu_opens_the_view(qtbot, make_window):
    pytest.importorskip("app.diagnostics_view")
    w = make_window(engine="own")
    action = next(a for a in w.actions() if a.text() == "Diagnostics…")
    action.trigger()
    view = w._diagnostics
    assert view.isVisible() and view.isWindow() and view.objectName() == "DiagnosticsView"
    view.close()
