"""What a load would be made with (ModelActions.load_target: the context setting, the KV cache precision and
where the model would run) is asked of the settings whenever it is used, never kept: the model library's
estimate and the Discover page's fit verdicts follow Settings applied after they were first shown, and both
plan with the engine's one memory formula (engine.model.arch.memory_estimate, under the load pre-flights)."""
from __future__ import annotations

import pytest
from PySide6.QtCore import Qt

from app.library import LoadTarget, human_size
from app.widgets.settings_dialog import SettingsDialog
from engine.api import estimate_memory
from engine.gguf import open_gguf
from engine.hub import Machine
from engine.hub.verdict import planned_needs
from engine.model.config import ModelConfig
from tests.fake_hub import FakeHub

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]

GIB = 1 << 30
REPO = "test/SmolLM2-GGUF"


def _apply(w, context: int | None = None, kv_type: str | None = None) -> None:
    """Settings… as the user does it: change a field, OK (the window applies the dialog)."""
    dlg = SettingsDialog(w.settings, w)
    if context is not None:
        dlg.sampling.context_length.setValue(context)
    if kv_type is not None:
        dlg.kv_cache_type.setCurrentIndex(dlg.kv_cache_type.findData(kv_type))
    w.apply_settings(dlg)


def _library_words(path, context: int, kv_type: str) -> tuple[str, str]:
    """The library's words for a GPU load of `path`, from engine.api.estimate_memory (SmolLM2: 8,192 trained)."""
    est = estimate_memory(str(path), context, "gpu", kv_cache_type=kv_type)
    return (f"Loading needs about <b>{human_size(est.total)}</b>",
            f"KV cache {human_size(est.kv_cache + est.recurrent_state)} ({kv_type}) for {context:,} tokens of context")


def test_the_library_estimate_follows_the_context_and_kv_precision_set_after_it_was_first_shown(
        qtbot, make_window, settings, smollm2_path):
    settings.backend = "auto"                # no model loaded and not the CPU: the estimate is for a GPU
    w = make_window(engine="own")
    assert w.models.load_target() == LoadTarget("gpu", 2048, "f32")

    def shown():
        w.models.show_library()
        dlg = w.models.library_dialog
        qtbot.waitUntil(lambda: dlg.table.rowCount() >= 1, timeout=10_000)
        dlg.select_path(str(smollm2_path))
        return dlg

    dlg = shown()
    for words in _library_words(smollm2_path, 2048, "f32"):
        assert words in dlg.estimate.text()
    _apply(w, context=4096)                                  # while the library is open
    for words in _library_words(smollm2_path, 4096, "f32"):
        assert words in dlg.estimate.text()
    _apply(w, kv_type="f16")
    for words in _library_words(smollm2_path, 4096, "f16"):
        assert words in dlg.estimate.text()
    qtbot.mouseClick(next(b for b in dlg.findChildren(type(dlg.load_button)) if b.text() == "Close"),
                     Qt.MouseButton.LeftButton)
    assert not dlg.isVisible()
    _apply(w, context=1024)                                  # while it is closed: shown again, it says so
    assert shown() is dlg
    for words in _library_words(smollm2_path, 1024, "f16"):
        assert words in dlg.estimate.text()


@pytest.fixture
def hub(monkeypatch, tmp_path, smollm2_path):
    with FakeHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        monkeypatch.setenv("HALO_MODELS_DIR", str(tmp_path / "models"))
        hub.add(REPO, smollm2_path.name, smollm2_path)
        yield hub


def test_discover_plans_the_chosen_kv_precision_and_context_and_judges_again_when_they_change(
        qtbot, make_window, settings, hub, smollm2_path):
    with open_gguf(smollm2_path) as g:
        config, tensors = ModelConfig.from_metadata(g.metadata), list(g.tensors.values())
    gpu = {kv: planned_needs(config, tensors, 2048, kv)[0] for kv in ("f32", "f16")}
    # the GPU plans differ by (at least) the library's KV cache figures: one formula under both
    kv = {t: estimate_memory(str(smollm2_path), 2048, "gpu", kv_cache_type=t).kv_cache for t in ("f32", "f16")}
    assert gpu["f32"] - gpu["f16"] >= kv["f32"] - kv["f16"] > 0
    w = make_window(engine="own")
    # a GPU the model fits in with an f16 cache and not with f32; RAM it fits in either way
    w.discover.machine = Machine(ram_free=64 * GIB, gpu_free=(gpu["f32"] + gpu["f16"]) // 2, gpu_name="Test GPU")
    w.discover.show(w)
    page = w.discover.page
    page.query.setText("smollm2")
    qtbot.mouseClick(page.search_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: page.repos.count() == 1, timeout=10_000)
    page.repos.itemClicked.emit(page.repos.item(0))

    def verdict(fit: str):
        qtbot.waitUntil(lambda: page.files.rowCount() == 1 and page.files.item(0, 4).text() == fit, timeout=20_000)
        page.files.selectRow(0)
        return page.files.item(0, 4).data(Qt.ItemDataRole.UserRole + 1)

    v = verdict("fits on the CPU only")                      # Settings' default: an exact f32 cache
    assert v.gpu_bytes == gpu["f32"] and "At a 2,048-token context.)" in v.words
    assert page.verdict.text().startswith("Does not fit on Test GPU")
    _apply(w, kv_type="f16")                                 # the open page judges again
    v = verdict("fits on the GPU")
    assert v.gpu_bytes == gpu["f16"] and "At a 2,048-token context, the GPU's KV cache in f16.)" in v.words
    assert page.verdict.text().startswith("Fits on Test GPU")
    _apply(w, context=8192)
    v = verdict("fits on the CPU only")                      # four times the cache no longer fits
    assert v.gpu_bytes == planned_needs(config, tensors, 8192, "f16")[0] and "At a 8,192-token context" in v.words
    w.discover._dialog.close()
