"""The Diagnostics view on real widgets: this machine's real probe, other machines' reports (real record
types read from JSON), the self-test button's pass and fail displays, Copy report and Save report."""
from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QPushButton

from app.diagnostics_tree import BADGE_ROLE, COL_BADGE, COL_ITEM, COL_VALUE
from app.diagnostics_view import DiagnosticsView
from engine.diagnostics_report import DiagnosticsReport

# The offscreen platform warns that it cannot propagate size hints of top-level windows: not a fault.
pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
MACHINES = Path(__file__).parents[1] / "unit" / "data" / "diagnostics"


def machine(name: str) -> DiagnosticsReport:
    return DiagnosticsReport.from_json((MACHINES / f"{name}.json").read_text(encoding="utf-8"))


def find(view: DiagnosticsView, *path: str):
    """The tree row reached by item texts (each a prefix), from the top level down."""
    items = [view.tree.topLevelItem(i) for i in range(view.tree.topLevelItemCount())]
    item = None
    for label in path:
        item = next((it for it in items if it.text(COL_ITEM).startswith(label)), None)
        assert item is not None, f"no row {label!r} in {[it.text(COL_ITEM) for it in items]}"
        items = [item.child(i) for i in range(item.childCount())]
    return item


def badge(item) -> tuple[str, str]:
    return item.text(COL_BADGE), item.data(COL_BADGE, BADGE_ROLE)


@pytest.fixture
def live_view(qtbot):
    view = DiagnosticsView(backend_setting="auto", async_setting=True)
    qtbot.addWidget(view)
    view.show()
    with qtbot.waitSignal(view.reportReady, timeout=30_000):
        pass
    yield view
    qtbot.waitUntil(lambda: not view.busy, timeout=30_000)


def test_real_probe_of_this_machine(live_view):
    report = live_view.report
    cpu = find(live_view, "Backends", "cpu")
    assert badge(cpu) == ("AVAILABLE", "ok")
    for p in report.probes:
        row = find(live_view, "Backends", p.backend)
        if p.available:
            assert badge(row)[0] == "AVAILABLE"
        else:
            assert badge(row) == ("NOT FOUND", "bad") and row.text(COL_VALUE) == p.reason
    # On a machine without a GPU (this one), every HIP and CUDA variant is absent, each with its reason.
    if not any(p.available for p in report.probes if p.backend != "cpu"):
        for name in ("hip-python", "ctypes-hip", "cuda-python", "ctypes-cuda"):
            assert len(find(live_view, "Backends", name).text(COL_VALUE)) > 20
    # every backend says where its kernels come from (prebuilt / run-time compiler / none and why)
    for p in report.probes:
        if p.kernels:
            assert find(live_view, "Backends", p.backend, "Kernels").text(COL_VALUE) == p.kernels.removeprefix("kernels: ")
    assert find(live_view, "Backends", "cpu", "Kernels").text(COL_VALUE).startswith("numpy on the host")
    assert badge(find(live_view, "In use", "Backend"))[0] == report.selected_backend
    assert live_view.backend_combo.currentText() == report.selected_backend
    assert "available backends:" in live_view.summary.text()


def test_seed_windows_gfx1151_shows_why_device_memory_is_not_host_addressable(qtbot):
    view = DiagnosticsView(report=machine("seed-windows-gfx1151"))
    qtbot.addWidget(view)
    row = find(view, "In use", "Device memory")
    assert badge(row) == ("NO", "bad")
    assert row.text(COL_VALUE).startswith("device memory not host-addressable: pageable memory access = 0")
    assert badge(find(view, "In use", "Readback path"))[0] == "pinned D2H copy"
    assert badge(find(view, "Backends", "ctypes-hip", "Probed attributes", "pageable_memory_access"))[0] == "0"
    assert badge(find(view, "Backends", "ctypes-hip", "Probed attributes", "integrated"))[0] == "1"
    assert find(view, "Backends", "ctypes-hip", "Device", "Arch").text(COL_VALUE) == "gfx1151"
    assert find(view, "Backends", "ctypes-hip", "Device", "Kind").text(COL_VALUE) == "integrated"
    caps = find(view, "Backends", "ctypes-hip", "Derived capabilities")
    assert badge(find(view, "Backends", "ctypes-hip", "Derived capabilities", "device memory host-addressable")) \
        == ("NO", "bad")
    assert "pageable_memory_access=0" in caps.child(1).text(COL_VALUE)
    assert badge(find(view, "Backends", "hip-python")) == ("NOT FOUND", "bad")


def test_linux_apu_with_pageable_access(qtbot):
    view = DiagnosticsView(report=machine("linux-rocm-apu"))
    qtbot.addWidget(view)
    assert badge(find(view, "In use", "Device memory")) == ("YES", "ok")
    assert badge(find(view, "Backends", "hip-python", "Probed attributes", "pageable_memory_access"))[0] == "1"
    assert badge(find(view, "Backends", "hip-python", "Probed attributes", "managed memory host read"))[0] == "PASSED"
    assert badge(find(view, "Backends", "hip-python", "Probed attributes", "device memory host read"))[0] == "PASSED"
    assert badge(find(view, "In use", "Readback path"))[0] == "pinned D2H copy"


def test_h200_facts(qtbot):
    view = DiagnosticsView(report=machine("h200"))
    qtbot.addWidget(view)
    dev = ("Backends", "cuda-python", "Device")
    assert find(view, *dev, "Name").text(COL_VALUE) == "NVIDIA H200"
    assert find(view, *dev, "Arch").text(COL_VALUE) == "sm_90"
    assert find(view, *dev, "Kind").text(COL_VALUE) == "discrete"
    assert "150,109,880,320 bytes" in find(view, *dev, "Total memory").text(COL_VALUE)
    assert find(view, *dev, "Runtime").text(COL_VALUE) == "cuda 13030, driver 13000"
    attrs = ("Backends", "cuda-python", "Probed attributes")
    assert [badge(find(view, *attrs, a))[0] for a in ("integrated", "pageable_memory_access", "managed_memory",
            "concurrent_managed_access", "can_map_host_memory", "unified_addressing")] == list("001111")
    assert badge(find(view, *attrs, "managed memory host read")) == ("PASSED", "ok")
    assert badge(find(view, *attrs, "device memory host read")) == ("FAILED", "bad")
    assert badge(find(view, "In use", "Device memory")) == ("NO", "bad")
    st = find(view, "Backends", "cuda-python", "Self-test")
    assert badge(st) == ("PASSED", "ok") and "500 steps x 8 ids, 0 mismatches; 43.67 us/step" in st.text(COL_VALUE)
    assert badge(find(view, "In use", "Async scheduling")) == ("ON", "ok")


def test_self_test_button_pass(live_view, qtbot):
    live_view.backend_combo.setCurrentText("cpu")
    with qtbot.waitSignal(live_view.selfTestFinished, timeout=30_000) as blocker:
        qtbot.mouseClick(live_view.self_test_button, Qt.MouseButton.LeftButton)
        assert not live_view.self_test_button.isEnabled()      # running on a worker: the window stays live
    run = blocker.args[0]
    assert run.passed and run.backend == "cpu"
    assert "PASSED" in live_view.self_test_status.text() and "0 mismatches" in live_view.self_test_status.text()
    assert badge(find(live_view, "Self-test (cpu)")) == ("PASSED", "ok")
    assert "200 steps x 8 ids, 0 mismatches" in find(live_view, "Self-test", "Readback").text(COL_VALUE)
    assert live_view.self_test_button.isEnabled()
    assert "## Self-test" in live_view.markdown()


def test_self_test_button_fail_on_an_unavailable_backend(live_view, qtbot):
    unavailable = next((p for p in live_view.report.probes if not p.available), None)
    if unavailable is None:
        pytest.skip("every backend is available here")
    live_view.backend_combo.setCurrentText(unavailable.backend)
    with qtbot.waitSignal(live_view.selfTestFinished, timeout=30_000) as blocker:
        qtbot.mouseClick(live_view.self_test_button, Qt.MouseButton.LeftButton)
    assert not blocker.args[0].passed
    status = live_view.self_test_status.text()
    assert "FAILED" in status and "backend unavailable" in status
    assert badge(find(live_view, f"Self-test ({unavailable.backend})")) == ("FAILED", "bad")
    error = find(live_view, "Self-test", "Error")
    assert badge(error) == ("ERROR", "bad") and error.text(COL_VALUE).startswith("backend unavailable: ")
    assert f"**{unavailable.backend}: FAILED**" in live_view.markdown()


def test_copy_report_puts_the_markdown_on_the_clipboard(qtbot):
    view = DiagnosticsView(report=machine("seed-windows-gfx1151"))
    qtbot.addWidget(view)
    QApplication.clipboard().clear()
    qtbot.mouseClick(view.copy_button, Qt.MouseButton.LeftButton)
    text = QApplication.clipboard().text()
    assert text == view.markdown()
    assert text.startswith("# Halo Chat diagnostics") and "### ctypes-hip: available" in text
    assert "device memory not host-addressable: pageable memory access = 0" in text
    assert "- Readback path: **pinned D2H copy**" in text and "| arch | gfx1151 |" in text


def test_save_report_writes_json_and_markdown(qtbot, tmp_path):
    view = DiagnosticsView(report=machine("h200"))
    qtbot.addWidget(view)
    saved = view.save_report(tmp_path / "report.json")
    assert DiagnosticsReport.from_json(saved.read_text(encoding="utf-8")).to_dict() == view.report.to_dict()
    md = view.save_report(tmp_path / "report.md")
    assert md.read_text(encoding="utf-8") == view.markdown() and "NVIDIA H200" in view.markdown()


def test_opened_from_the_menu_and_from_a_backend_error(make_window, qtbot):
    from engine.errors import BackendUnavailableError

    window = make_window(engine="own")
    action = next(a for a in window.actions() if a.text() == "Diagnostics…")
    action.trigger()
    view = window._diagnostics
    assert isinstance(view, DiagnosticsView) and view.isVisible()
    qtbot.waitUntil(lambda: view.report is not None, timeout=30_000)
    view.close()

    window.client.loadFailed.emit("model.gguf", BackendUnavailableError("hipErrorNoDevice: no ROCm device"))
    button = next(b for b in window.banner.findChildren(QPushButton) if b.text() == "Diagnostics…")
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
    assert window._diagnostics is not view and window._diagnostics.isVisible()
    qtbot.waitUntil(lambda: not window._diagnostics.busy, timeout=30_000)
