"""How messages render in the real widgets: kept line breaks, code blocks that stand out in both themes and
in a user bubble, Pygments colours, a Copy link per block, streaming parsed at a bounded rate that slows as
renders get dearer (the work over a long reply stays linear in its length), plain titles."""
from __future__ import annotations

import pytest
from PySide6.QtCore import QUrl
from PySide6.QtGui import QColor, QGuiApplication, QTextBlockFormat
from PySide6.QtWidgets import QApplication

from app.markdown_prep import COPY_SCHEME, plain_title, prepare
from app.theme import apply_theme, palette_colors
from app.widgets import message_view
from app.widgets.message_view import STREAM_RENDER_MS, MarkdownView, MessageView
from app.widgets.stream_pacer import StreamPacer

pytestmark = [pytest.mark.gui]
POEM = "Roses are red\nViolets are blue"
CODE = "Here:\n```python\ndef f(x):\n    return x + 1\n```\nand\n```\nplain text\n```"


def _luminance(hex_color: str) -> float:
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    q = QColor(hex_color)
    return 0.2126 * channel(q.redF()) + 0.7152 * channel(q.greenF()) + 0.0722 * channel(q.blueF())


def _contrast(a: str, b: str) -> float:
    hi, lo = sorted((_luminance(a), _luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("role", ["user", "assistant"])
def test_single_line_breaks_are_kept(qtbot, role):
    view = MessageView(1, role, POEM)
    qtbot.addWidget(view)
    doc = view.body.document()
    assert doc.toPlainText().splitlines()[:2] == ["Roses are red", "Violets are blue"]
    assert view.text() == POEM                       # copy gives back what was written


@pytest.mark.parametrize("theme", ["light", "dark"])
def test_code_blocks_stand_out_in_both_themes_and_in_a_user_bubble(qtbot, theme):
    colors = apply_theme(QApplication.instance(), theme)
    try:
        assert _contrast(colors["code_bg"], colors["bg"]) >= 1.2
        assert _contrast(colors["code_bg_user"], colors["user_bubble"]) >= 1.2
        for role, key in (("assistant", "code_bg"), ("user", "code_bg_user")):
            view = MessageView(1, role, CODE)
            qtbot.addWidget(view)
            block = view.body.document().begin()
            tinted, coloured = [], set()
            while block.isValid():
                fmt = block.blockFormat()
                if fmt.hasProperty(QTextBlockFormat.Property.BlockCodeFence):
                    tinted.append(fmt.background().color().name())
                    it = block.begin()
                    while not it.atEnd():
                        coloured.add(it.fragment().charFormat().foreground().color().name())
                        it += 1
                block = block.next()
            assert tinted and set(tinted) == {colors[key].lower()}
            assert len(coloured) >= 3                    # keywords, names, numbers differ: highlighted
    finally:
        apply_theme(QApplication.instance(), "light")


def test_each_code_block_has_its_own_copy_link(qtbot):
    view = MessageView(1, "assistant", CODE)
    qtbot.addWidget(view)
    assert view.body.code_blocks == (("python", "def f(x):\n    return x + 1"), ("", "plain text"))
    assert view.body.document().toPlainText().count("Copy code") == 2
    with qtbot.waitSignal(view.body.codeCopied) as blocker:
        view.body.anchorClicked.emit(QUrl(f"{COPY_SCHEME}:1"))
    assert blocker.args == [1] and QGuiApplication.clipboard().text() == "plain text"
    view.body.anchorClicked.emit(QUrl(f"{COPY_SCHEME}:0"))
    assert QGuiApplication.clipboard().text() == "def f(x):\n    return x + 1"


def test_a_streaming_reply_is_parsed_at_a_bounded_rate_and_whole_at_the_end(qtbot):
    view = MessageView(1, "assistant", "", "streaming")
    qtbot.addWidget(view)
    text = ""
    for i in range(400):                              # 400 deltas arriving faster than the render interval
        text += f"word{i} "
        view.set_text(text)
        assert view.text() == text
    assert view.body.render_count <= 2
    qtbot.wait(STREAM_RENDER_MS * 2)
    assert view.body.markdown() == text               # the last pending text was rendered
    rendered = view.body.render_count
    view.set_text(text + "end")
    view.set_state("complete")
    assert view.body.markdown() == text + "end" and view.body.render_count == rendered + 1


def _table_rows(rows: int) -> list[str]:
    """A Markdown table, one line a row, 5 columns of about 100 characters a row."""
    lines = ["| " + " | ".join(f"column {c}" for c in range(5)) + " |", "|---" * 5 + "|"]
    return lines + ["| " + " | ".join(f"row {r} cell {c}".ljust(15) for c in range(5)) + " |" for r in range(rows)]


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_a_long_streaming_reply_is_rendered_less_often_as_renders_get_dearer(qtbot, monkeypatch):
    """Each render parses and lays out the whole text so far, so it costs in proportion to its length. Rendered
    at a fixed rate, a 12 KB table streaming on a slow machine was parsed again for every row: the work over the
    reply grew with the square of its length, and the renders ran back to back (the GUI stalled).

    A simulated slow machine, on the pacer's clock (no timing here): a render takes 50 ms per KB, a row of the
    table arrives every 0.1 s. After each render the view keeps quiet 4 times as long as it took, so renders
    thin out as the text grows: at most 1/5 of the stream goes to rendering, and the characters parsed stay
    within a few times the reply's length (at a fixed rate: about 60 times)."""
    now = [0.0]
    monkeypatch.setattr(StreamPacer, "clock", staticmethod(lambda: now[0]))
    monkeypatch.setattr(message_view, "STREAM_RENDER_MS", 1)      # the pace under test is the cost's
    parsed: list[int] = []
    render = MarkdownView.set_markdown

    def slow_render(self, text: str) -> None:
        render(self, text)
        parsed.append(len(text))
        now[0] += 0.05 * len(text) / 1024

    monkeypatch.setattr(MarkdownView, "set_markdown", slow_render)
    view = MessageView(1, "assistant", "", "streaming")
    qtbot.addWidget(view)
    view.resize(700, 400)
    view.show()
    text = "Here is the table:\n\n"
    for row in _table_rows(120):
        text += row + "\n"
        now[0] += 0.1
        view.set_text(text)
        qtbot.wait(3)                     # the event loop runs: a render that is due happens
    streamed = sum(parsed)
    assert len(parsed) >= 5                                   # the table still grows on screen while it streams
    assert streamed <= 8 * len(text)
    view.set_state("complete")
    assert view.body.markdown() == text and parsed[-1] == len(text)       # then rendered whole, at once
    assert view.body.document().rootFrame().childFrames()                 # as a table


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_an_open_thinking_section_is_not_parsed_again_for_every_delta(qtbot):
    view = MessageView(1, "assistant", "", "streaming")
    qtbot.addWidget(view)
    view.show()
    reasoning = "Let me think."
    view.set_reasoning(reasoning)
    view.thinking.set_expanded(True)
    body = view.thinking.body
    opened = body.render_count
    for i in range(300):                  # deltas arriving faster than the render interval
        reasoning += f" step{i}"
        view.set_reasoning(reasoning)
    assert body.render_count - opened <= 1                    # it was parsed whole for each of them
    qtbot.waitUntil(lambda: body.markdown() == reasoning)
    view.set_state("complete")
    assert body.markdown() == reasoning and view.thinking.reasoning() == reasoning


def test_code_is_coloured_in_one_document_edit_not_one_per_token(qtbot):
    """Each format change to a laid-out document lays it out again: one change per code line and per token made
    a re-render (each streaming one, the finished reply's) quadratic in the size of the code (19 KB: 2.5 s)."""
    code = "```python\n" + "\n".join(f"def f{i}(x, y=2):\n    return x + {i} * y" for i in range(100)) + "\n```"
    view = MessageView(1, "assistant", "")
    qtbot.addWidget(view)
    changes: list[tuple[int, int, int]] = []
    view.body.document().contentsChange.connect(lambda *change: changes.append(change))
    view.set_text("Code:\n\n" + code)
    assert len(changes) < 10              # the import, then the colours at once (not 200 lines + ~1000 tokens)
    assert view.body.code_blocks[0][1].count("\n") == 199


def test_titles_and_prepared_markdown():
    assert plain_title("# Heading one ## sub\nmore") == "Heading one ## sub"
    assert plain_title("**Bold** and [a link](http://x) `code`") == "Bold and a link code"
    assert plain_title("```\ncode only\n```") == "code only"
    assert plain_title("   \n") == "New chat"
    assert plain_title("x" * 60).endswith("…")
    # a block still streaming (no closing fence yet) is copyable as far as it got
    assert prepare("```js\nlet a").blocks == (("js", "let a"),)


@pytest.mark.parametrize(("text", "blocks"), [
    ("```\na\n    ```\nb\n```", (("", "a\n    ```\nb"),)),      # indented 4: a code line, not the close
    ("1. step\n\n   ```sh\n   ls -la\n   ```", (("sh", "ls -la"),)),   # the fence's indentation is not code
    ("```py\r\nx = 1\r\ny = 2\r\n```\r\n", (("py", "x = 1\ny = 2"),)),  # CRLF text
    ("```\ncode\n`````\nafter", (("", "code"),)),                   # a longer closing fence closes
])
def test_copy_code_copies_what_the_block_shows(text, blocks):
    assert prepare(text).blocks == blocks


def test_a_table_with_crlf_line_ends_is_a_table(qtbot):
    view = MessageView(1, "assistant", "| a | b |\r\n|---|---|\r\n| 1 | 2 |\r\n")
    qtbot.addWidget(view)
    assert view.body.document().rootFrame().childFrames()                 # the table's frame
    assert view.text() == "| a | b |\r\n|---|---|\r\n| 1 | 2 |\r\n"      # copy gives back what was written


def test_palette_files_name_both_code_backgrounds():
    for dark in (False, True):
        assert {"code_bg", "code_bg_user"} <= palette_colors(dark).keys()


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_a_full_message_header_fits_a_narrow_window(qtbot):
    # Every header item at once: the cut-off badge, the speed detail, Continue and the ‹ 2/2 › pager.
    # Unelided, these made one message 743 px wide, wider than a 640 px window (its right side was cut).
    view = MessageView(1, "assistant", "hello")
    qtbot.addWidget(view)
    view.set_truncated(True)
    view.set_detail("160 tokens · 17.4 tok/s")
    view.set_alternatives(2, 2)
    view.continue_button.setVisible(True)
    view.show()
    assert view.minimumSizeHint().width() <= 560
    view.resize(560, view.height())
    badge = view.state_badge   # the whole text is kept: shown, or in the tooltip when elided
    assert badge.shown_text() == badge.text() or badge.toolTip() == badge.text()
    assert view.detail_label.text() == "160 tokens · 17.4 tok/s"


# ---- model output is untrusted text ---------------------------------------------------------------------------

def test_tags_in_a_reply_are_text_not_markup(qtbot):
    view = MessageView(1, "assistant", "Use the <div> element. Generic: List<String> and Map<K, V>.\n\n<b>x</b> end")
    qtbot.addWidget(view)
    shown = view.body.document().toPlainText()
    assert "Use the <div> element. Generic: List<String> and Map<K, V>." in shown and "<b>x</b> end" in shown


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_an_image_in_a_reply_is_never_read_from_disk(qtbot, tmp_path):
    """`![x](path)` would make Qt read a file the model chose on the GUI thread (a FIFO hangs it, /dev/zero
    exhausts memory); the view loads no resource, so a 400 px image adds no height."""
    from PySide6.QtGui import QImage

    picture = tmp_path / "big.png"
    image = QImage(400, 400, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    assert image.save(str(picture))
    plain = MessageView(1, "assistant", "before\n\nafter")
    with_image = MessageView(2, "assistant", f"before\n\n![chart]({picture.as_uri()})\n\nafter")
    for view in (plain, with_image):
        qtbot.addWidget(view)
        view.resize(600, 400)
        view.show()
    qtbot.waitUntil(lambda: with_image.body.height() > 0)
    assert with_image.body.height() < plain.body.height() + 100


def test_only_web_links_in_a_reply_are_opened(qtbot, monkeypatch):
    from PySide6.QtGui import QDesktopServices

    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", lambda url: opened.append(url.toString()) or True)
    view = MessageView(1, "assistant", "links")
    qtbot.addWidget(view)
    for link in ("file:///etc/passwd", "javascript:alert(1)", "ms-settings:privacy", "smb://10.0.0.1/share",
                 "vscode://file/etc/passwd", "../../etc/passwd", f"{COPY_SCHEME}:abc", "https://example.com/a",
                 "HTTP://example.com/b"):
        view.body.anchorClicked.emit(QUrl(link))
    assert opened == ["https://example.com/a", "http://example.com/b"]


def test_every_pygments_language_colours_a_code_block_in_both_themes():
    """Some lexers' token types are unknown to a style (YAML's Literal.Scalar.Plain): the colour comes from the
    nearest known ancestor, where style_for_token raised KeyError and the chat could not be shown."""
    from pygments.lexers import get_all_lexers

    from app.code_highlight import highlight_spans

    code = 'key: value\nx = [1, "two"]  # note\n'
    for _name, aliases, *_ in get_all_lexers():
        for dark in (False, True):
            if aliases:
                highlight_spans(code, aliases[0], dark)
    assert highlight_spans(code, "yaml", False)


HOSTILE = "<img src='file:///etc/hosts'> <b>bold?</b> List<String>"


@pytest.mark.qt_log_ignore("This plugin does not support")
def test_untrusted_names_and_errors_show_as_written(qtbot, make_window):
    """Qt takes text that looks like HTML for rich text (obeying tags, loading <img> files) unless told; chat
    titles, model names and servers' errors are shown as written."""
    from PySide6.QtCore import Qt

    from app.widgets.plain_text import plain_tooltip

    w = make_window(engine="own")
    w.store.rename(w.current_id, HOSTILE)
    w.refresh_conversations()
    w.title_label.setText(HOSTILE)
    assert w.title_label.textFormat() == Qt.TextFormat.PlainText
    w.banner.show_message("Cannot load", HOSTILE)
    assert w.banner.body.textFormat() == Qt.TextFormat.PlainText and w.banner.body.text() == HOSTILE
    view = MessageView(1, "assistant", "x")
    qtbot.addWidget(view)
    view.set_state("error", HOSTILE)
    assert view.state_badge.textFormat() == Qt.TextFormat.PlainText
    assert view.state_badge.toolTip() == plain_tooltip(HOSTILE) and "&lt;b&gt;" in view.state_badge.toolTip()
    assert plain_tooltip("no markup here") == "no markup here"
