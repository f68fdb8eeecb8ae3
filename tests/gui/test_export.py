"""Export's suggested file name: a chat's title made a file name that is valid on every system, and a chat
exported under it on the real window."""
from __future__ import annotations

import pytest
from PySide6.QtWidgets import QFileDialog, QMessageBox

from app.export import FALLBACK_STEM, STEM_MAX_CHARS, file_stem
from tests.gui.conftest import send

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]


@pytest.mark.parametrize("title, stem", [
    ("What is 1/2 + 1/4?", "What is 1 2 + 1 4"),
    ('a<b>c:d"e/f\\g|h?i*j', "a b c d e f g h i j"),
    ("tabs\tand\nnew  lines\x00\x1f\x7fend", "tabs and new lines end"),
    ("  ...trailing dots and spaces. . ", "trailing dots and spaces"),
    (".hidden", "hidden"),
    ("Naïve café ☕ …", "Naïve café ☕ …"),
    ("", FALLBACK_STEM),
    ("?*/ :", FALLBACK_STEM),
    ("CON", FALLBACK_STEM),
    ("nul.txt", FALLBACK_STEM),
    ("aux .md", FALLBACK_STEM),
    ("Com1", FALLBACK_STEM),
    ("LPT9", FALLBACK_STEM),
    ("COM10", "COM10"),
    ("com0", FALLBACK_STEM),
    ("LPT¹", FALLBACK_STEM),
    ("COM³.log", FALLBACK_STEM),
    ("conin$", FALLBACK_STEM),
    ("CONOUT$ ", FALLBACK_STEM),
    ("COM⁴", "COM⁴"),
    ("console", "console"),
])
def test_file_stem_of_tricky_titles(title, stem):
    assert file_stem(title) == stem


def test_file_stem_is_capped_without_ending_in_a_space_or_dot():
    title = "x" * (STEM_MAX_CHARS - 1) + " tail"
    assert file_stem(title) == "x" * (STEM_MAX_CHARS - 1)
    assert len(file_stem("y" * 500)) == STEM_MAX_CHARS


def test_an_export_that_cannot_be_written_leaves_no_partial_file(tmp_path):
    from app.export import export
    from app.store import Store

    store = Store(tmp_path / "history.sqlite3")
    conv = store.create_conversation("Trip")
    store.add_message(conv.id, "user", "hello")
    target = tmp_path / "Trip.md"
    target.mkdir()                                  # the name is taken by a folder: the final rename fails
    with pytest.raises(OSError):
        export(store.conversation(conv.id), store.messages(conv.id), target)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("Trip")) == ["Trip.md"]
    store.close()


@pytest.mark.golden
def test_a_chat_exports_under_the_suggested_name(qtbot, make_window, monkeypatch, tmp_path):
    w = make_window()
    send(qtbot, w, "What is 1/2 + 1/4?")
    conv = w.current_id
    assert w.store.conversation(conv).title == "What is 1/2 + 1/4?"
    name = w.suggested_export_name(conv)
    assert name == "What is 1 2 + 1 4.md"
    w.export_conversation(conv, tmp_path / name)
    assert (tmp_path / name).read_text(encoding="utf-8").startswith("# What is 1/2 + 1/4?")

    # Chat > Export offers that name; accepted as offered, the file is written there
    offered = []

    def accept_offered_name(_parent, _caption, name, _filters):
        offered.append(name)
        return str(tmp_path / "menu" / name), ""

    (tmp_path / "menu").mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", accept_offered_name)
    monkeypatch.setattr(QMessageBox, "warning", lambda *a, **k: pytest.fail(f"export failed: {a[2]}"))
    w.store.rename(conv, "CON")                              # a Windows device name: not a file's
    w.export_current()
    assert offered == [f"{FALLBACK_STEM}.md"]
    assert (tmp_path / "menu" / offered[0]).read_text(encoding="utf-8").startswith("# CON")
