"""A GPU backend chosen in Settings that cannot run here: the window says so once, in words, and
Diagnostics shows what really runs."""
from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gui, pytest.mark.golden, pytest.mark.qt_log_ignore("This plugin does not support")]


def test_an_unavailable_gpu_backend_is_said_once_and_diagnostics_show_the_cpu(make_window, settings, qtbot,
                                                                               smollm2_path):
    settings.backend = "hip"
    window = make_window(engine="own")
    with qtbot.waitSignal(window.client.loaded, timeout=60_000):
        window.models.load_path_now(str(smollm2_path))
    if not window.client.model.backend.startswith("cpu"):
        pytest.skip("this machine runs HIP: nothing falls back")
    assert window.banner.isVisible()
    assert window.banner.title.text() == "The AMD GPU (HIP) is not available: running on the CPU"
    assert "Why: " in window.banner.body.text() and "hip" in window.banner.body.text().lower()
    assert window.banner.action_labels() == ["Use the CPU from now on", "Diagnostics…"]

    window.banner.dismiss_button.click()
    with qtbot.waitSignal(window.client.loaded, timeout=60_000):
        window.models.load_path_now(str(smollm2_path))
    assert not window.banner.isVisible()                       # once per session, not at every load

    window.open_diagnostics()
    view = window._diagnostics
    qtbot.waitUntil(lambda: "Running now" in view.summary.text(), timeout=30_000)
    assert "cpu" in view.summary.text() and "fallback" in view.summary.text().lower()
