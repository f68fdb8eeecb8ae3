"""Model files (bad ones, loading with progress and cancel) and settings that persist."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QPushButton

from app.settings import AppSettings, Sampling
from app.widgets.settings_dialog import SettingsDialog
from tests.gui.conftest import send

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


def _drop(window, path) -> None:
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    event = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)


@pytest.mark.golden
def test_dropping_an_invalid_file_explains_and_the_app_keeps_working(qtbot, make_window, tmp_path):
    w = make_window()
    loaded_before = w.client.model
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (10**12).to_bytes(8, "little") + bytes(16))
    _drop(w, bad)
    qtbot.waitUntil(w.banner.isVisible, timeout=5_000)
    assert "broken.gguf" in w.banner.title.text()
    assert "tensor" in w.banner.body.text().lower() or "n_tensors" in w.banner.body.text()
    assert w.client.model is loaded_before   # the loaded model was never touched
    _cid, mid, fin = send(qtbot, w, "Still there?")
    assert fin.reason in ("stop", "length") and w.store.message(mid).content


def test_not_a_gguf_at_all_names_the_problem(qtbot, make_window, tmp_path):
    w = make_window(engine="own")
    bad = tmp_path / "notes.gguf"
    bad.write_text("these are my notes, not a model")
    _drop(w, bad)
    qtbot.waitUntil(w.banner.isVisible, timeout=5_000)
    assert "this file is not a GGUF model" in w.banner.body.text()


@pytest.mark.golden
@pytest.mark.slow
def test_loading_shows_progress_can_be_cancelled_and_then_succeeds(qtbot, make_window, smollm2_path):
    w = make_window(engine="own")
    assert w.client.model is None and "No model" in w.status.model_label.text()
    w.models.load_path_now(str(smollm2_path))
    assert w.load_bar.isVisible() and "MB" in w.load_bar.label.text()   # the memory estimate
    with qtbot.waitSignal(w.client.loadCancelled, timeout=30_000):
        qtbot.mouseClick(w.load_bar.cancel_button, Qt.MouseButton.LeftButton)
    assert not w.load_bar.isVisible() and w.client.model is None
    fractions = []
    w.client.loadProgress.connect(lambda f, _m: fractions.append(f))
    with qtbot.waitSignal(w.client.loaded, timeout=120_000):
        w.models.load_path_now(str(smollm2_path))
    assert fractions and fractions == sorted(fractions)
    assert not w.load_bar.isVisible()
    assert "Smollm2" in w.status.model_label.text() or "SmolLM2" in w.status.model_label.text()
    assert w.settings.last_model == str(smollm2_path)


def test_library_lists_models_with_details(qtbot, make_window, smollm2_path, tmp_path, monkeypatch):
    monkeypatch.setenv("HALO_MODELS_DIR", str(smollm2_path.parent))
    w = make_window(engine="own")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "junk.gguf").write_bytes(b"nope")
    w.settings.model_folders = [str(tmp_path / "extra")]
    w.models.show_library()
    dlg = w.models.library_dialog
    qtbot.waitUntil(lambda: dlg.table.rowCount() >= 2, timeout=10_000)
    rows = {dlg.table.item(r, 5).text(): [dlg.table.item(r, c).text() for c in range(5)]
            for r in range(dlg.table.rowCount())}
    smol = rows[smollm2_path.name]
    assert smol[1:] == ["llama", "98.4 MB", "Q4_1", "8,192"]
    assert rows["junk.gguf"][1] == "unreadable"
    dlg.select_path(str(smollm2_path))
    assert "Loading needs about" in dlg.estimate.text() and dlg.load_button.isEnabled()
    dlg.select_path(str(tmp_path / "extra" / "junk.gguf"))
    assert "cannot be used" in dlg.estimate.text() and not dlg.load_button.isEnabled()


def test_settings_persist_across_restart(qtbot, make_window, tmp_path):
    w = make_window(engine="own")
    dlg = SettingsDialog(w.settings, w)
    dlg.backend.setCurrentIndex(dlg.backend.findData("cpu"))
    dlg.theme.setCurrentIndex(dlg.theme.findData("dark"))
    dlg.async_scheduling.setChecked(False)
    dlg.add_folder(str(tmp_path / "models-b"))
    dlg.system_prompt.setPlainText("Answer in French.")
    dlg.sampling.temperature.setValue(0.3)
    dlg.sampling.seed.setValue(42)
    dlg.sampling.max_tokens.setValue(256)
    w.apply_settings(dlg)
    assert w.client.backend == "cpu"
    assert "Async: off" in w.status.async_label.text()

    fresh = AppSettings()   # a new QSettings object reads the file again, as a restarted app would
    assert (fresh.backend, fresh.theme, fresh.async_scheduling) == ("cpu", "dark", False)
    assert fresh.model_folders == [str(tmp_path / "models-b")]
    assert fresh.system_prompt == "Answer in French."
    assert fresh.sampling == Sampling(temperature=0.3, top_p=1.0, top_k=0, max_tokens=256,
                                      context_length=2048, seed=42)
    reopened = SettingsDialog(fresh, w)
    assert reopened.backend.currentData() == "cpu" and reopened.theme.currentData() == "dark"
    assert reopened.sampling.value().seed == 42
    # new conversations start from the new defaults
    w.new_conversation()
    prompt, sampling = w.conversation_settings(w.current_id)
    assert prompt == "Answer in French." and sampling.temperature == 0.3


def test_sampling_defaults_are_read_back_from_the_file_as_a_restarted_app_reads_them(tmp_path):
    """A restarted app's QSettings gives every INI value back as text; the defaults must survive that (in the
    process that wrote them Qt still holds the numbers, so a same-process reread cannot show it)."""
    from PySide6.QtCore import QSettings

    path = tmp_path / "Halo Chat.ini"
    path.write_text("[sampling]\ntemperature=0.3\ntop_p=0.9\ntop_k=7\nmax_tokens=256\ncontext_length=2048\n"
                    "seed=42\ncontext_overflow=drop_oldest\n", encoding="utf-8")
    restored = AppSettings(QSettings(str(path), QSettings.Format.IniFormat)).sampling
    assert restored == Sampling(temperature=0.3, top_p=0.9, top_k=7, max_tokens=256, context_length=2048, seed=42,
                                context_overflow="drop_oldest")
    path.write_text("[sampling]\ntemperature=warm\nmax_tokens=lots\ntop_k=3\n", encoding="utf-8")
    hand_edited = AppSettings(QSettings(str(path), QSettings.Format.IniFormat)).sampling
    assert hand_edited == Sampling(top_k=3)          # what is no number falls back to the default


@pytest.mark.golden
def test_a_new_context_length_offers_to_reload_the_loaded_model(qtbot, make_window, settings, smollm2_path):
    # the setting is what a load allocates: a loaded model keeps its context until it loads again, and says so
    settings.backend = "cpu"
    settings.sampling = Sampling(context_length=1024)
    w = make_window(engine="own")
    with qtbot.waitSignal(w.client.loaded, timeout=60_000):
        w.models.load_path_now(str(smollm2_path))
    assert w.client.model.max_context == 1024
    dlg = SettingsDialog(w.settings, w)
    dlg.sampling.context_length.setValue(2048)
    w.apply_settings(dlg)
    assert w.banner.isVisible() and "1,024" in w.banner.body.text() and "2,048" in w.banner.body.text()
    reload = next(b for b in w.banner.findChildren(QPushButton) if b.text() == "Reload now")
    with qtbot.waitSignal(w.client.loaded, timeout=60_000) as loaded:
        reload.click()
    assert loaded.args[0].max_context == 2048
    w.banner.hide()
    w.apply_settings(SettingsDialog(w.settings, w))          # nothing changed: nothing offered
    assert not w.banner.isVisible()
