"""Settings > KV cache precision: persisted, handed to the engine the window makes, counted by the model
library's estimate where the model would run on a GPU, and what the loaded model really got shown in the
status bar and Diagnostics (a model on the CPU keeps f32 whatever the setting)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from app.library import human_size, inspect_model
from app.settings import AppSettings
from app.widgets.settings_dialog import SettingsDialog
from engine.api import estimate_memory
from engine.gguf import open_gguf
from engine.model.arch import kv_split_bytes_per_token
from engine.model.config import ModelConfig

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
TINY = DATA / "tiny-qwen3-q4_k_m.gguf"


def _choose(dlg: SettingsDialog, kv_type: str) -> None:
    dlg.kv_cache_type.setCurrentIndex(dlg.kv_cache_type.findData(kv_type))


def test_the_precision_persists_reaches_the_engine_and_the_loaded_type_is_shown(qtbot, make_window, settings):
    settings.backend = "cpu"
    w = make_window(engine="own")
    dlg = SettingsDialog(w.settings, w)
    box = dlg.kv_cache_type
    assert [box.itemText(i) for i in range(box.count())] == ["Float32 (exact)",
                                                             "Float16 (half the memory)"]
    assert box.currentData() == "f32"                        # the default: exact
    _choose(dlg, "f16")
    w.apply_settings(dlg)
    assert w.client.kv_cache_type == "f16"

    fresh = AppSettings()       # a new QSettings object reads the file again, as a restarted app would
    assert fresh.kv_cache_type == "f16"
    assert SettingsDialog(fresh, w).kv_cache_type.currentData() == "f16"
    fresh.q.setValue("engine/kv_cache_type", "q4")           # a hand-edited file: the default, not a crash
    assert AppSettings().kv_cache_type == "f32"
    fresh.kv_cache_type = "f16"

    # the next load makes the engine with the setting; on the CPU the model gets f32 and the window says so
    with qtbot.waitSignal(w.client.loaded, timeout=60_000):
        w.models.load_path_now(str(TINY))
    assert w.client.engine.kv_cache_type == "f16"
    assert w.client.model.backend == "cpu" and w.client.model.kv_cache_type == "f32"
    assert w.status.kv_label.text() == "KV cache: f32"
    w.open_diagnostics()
    view = w._diagnostics
    qtbot.waitUntil(lambda: "Running now" in view.summary.text(), timeout=30_000)
    assert "KV cache" in view.summary.text() and "&nbsp;f32&nbsp;" in view.summary.text()
    assert "prompt steps" in view.summary.text() and "&nbsp;256 tokens&nbsp;" in view.summary.text()   # the CPU's

    restarted = make_window(engine="own")                    # a later start uses the stored setting
    assert restarted.client.kv_cache_type == "f16"


def test_the_library_estimate_counts_the_chosen_type_for_a_gpu(qtbot, make_window, settings, tmp_path,
                                                               monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(TINY, models / TINY.name)
    monkeypatch.setenv("HALO_MODELS_DIR", str(models))
    settings.backend = "auto"                 # no model loaded and not the CPU: the estimate is for a GPU
    settings.kv_cache_type = "f16"
    w = make_window(engine="own")
    ctx = settings.sampling.context_length

    def shown() -> str:
        w.models.show_library()
        dlg = w.models.library_dialog
        qtbot.waitUntil(lambda: dlg.table.rowCount() == 1, timeout=10_000)
        dlg.select_path(str(models / TINY.name))
        return dlg.estimate.text()

    def kv_text(backend: str, kv_type: str) -> str:
        est = estimate_memory(str(TINY), ctx, backend, kv_cache_type=kv_type)
        return f"KV cache {human_size(est.kv_cache + est.recurrent_state)} ({kv_type})"

    f16 = estimate_memory(str(TINY), ctx, "gpu", kv_cache_type="f16")
    f32 = estimate_memory(str(TINY), ctx, "gpu", kv_cache_type="f32")
    slots = -(-min(ctx, inspect_model(TINY).context_length) // 16) * 16      # whole blocks of 16
    # K and V halve, the token ids stay, f32's prefill split copy (engine.model.arch) goes
    with open_gguf(TINY) as g:
        copy = slots * kv_split_bytes_per_token(ModelConfig.from_metadata(g.metadata), "gpu", "f32")
    assert f32.kv_cache - f16.kv_cache == (f32.kv_cache - 4 * slots - copy) // 2 + copy
    assert kv_text("gpu", "f16") in shown()
    assert human_size(f16.total) in shown()

    dlg = SettingsDialog(w.settings, w)
    _choose(dlg, "f32")
    w.apply_settings(dlg)
    assert kv_text("gpu", "f32") in shown()                   # the open dialog follows the setting

    dlg = SettingsDialog(w.settings, w)
    _choose(dlg, "f16")
    dlg.backend.setCurrentIndex(dlg.backend.findData("cpu"))
    w.apply_settings(dlg)
    assert kv_text("cpu", "f32") in shown()                   # the CPU keeps f32 whatever the setting


def test_the_saved_and_copied_diagnostics_report_records_the_kv_cache_type_the_view_shows(qtbot, make_window,
                                                                                         settings, tmp_path):
    """Help > Diagnostics: the report saved (JSON, Markdown) and copied records the loaded model's KV cache type,
    the one the view's "Running now" line and the status bar show: what the model got, not the setting."""
    import json

    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QApplication

    def diagnostics(w):
        next(a for a in w.actions() if a.text() == "Diagnostics…").trigger()
        view = w._diagnostics
        qtbot.waitUntil(lambda: view.report is not None, timeout=30_000)
        return view

    idle = diagnostics(make_window(engine="own"))               # no model loaded: nothing to record
    assert "KV cache" not in idle.summary.text()
    assert json.loads(idle.save_report(tmp_path / "idle.json").read_text(encoding="utf-8"))["kv_cache_type"] == ""
    assert "KV cache" not in idle.save_report(tmp_path / "idle.md").read_text(encoding="utf-8")
    idle.close()

    settings.kv_cache_type = "f16"               # the setting; the shared engine's model runs on the CPU in f32
    w = make_window()
    assert w.client.model.kv_cache_type == "f32" and w.status.kv_label.text() == "KV cache: f32"
    view = diagnostics(w)
    assert "KV cache" in view.summary.text() and "&nbsp;f32&nbsp;" in view.summary.text()
    assert "prompt steps" in view.summary.text() and "&nbsp;256 tokens&nbsp;" in view.summary.text()   # the CPU's
    saved = json.loads(view.save_report(tmp_path / "report.json").read_text(encoding="utf-8"))
    assert saved["kv_cache_type"] == "f32"
    markdown = view.save_report(tmp_path / "report.md").read_text(encoding="utf-8")
    in_use = markdown.split("## In use")[1].split("\n## ")[0]
    assert "- KV cache: **f32** (the loaded model's)" in in_use
    QApplication.clipboard().clear()
    qtbot.mouseClick(view.copy_button, Qt.MouseButton.LeftButton)
    assert QApplication.clipboard().text() == markdown
    view.close()
