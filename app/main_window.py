"""The main window: sidebar of conversations, the chat, the composer, menus and the status bar.

It wires the parts; the logic lives in ChatController (turns and history), EngineClient (the engine),
ModelLibrary (files) and the widgets. Model loading and errors are in app/window_models.py.
Slots that read or write the history are @history_slot (app/history_slot.py): what the history refuses or finds
damaged is shown in the banner (_on_save_failed, the one message for it), never raised into the Qt event loop.
"""
from __future__ import annotations

import sqlite3

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.chat_controller import ChatController
from app.discover import DiscoverActions
from app.engine_client import EngineClient
from app.export import FORMATS, export, file_stem
from app.history_slot import history_slot
from app.model_manager import ModelLibrary
from app.remote_models import RemoteActions
from app.server_panel import LocalServerActions
from app.settings import AppSettings, Sampling
from app.store import Store, is_damage
from app.theme import app_icon, apply_theme
from app.widgets.banner import Banner
from app.widgets.chat_view import ChatView
from app.widgets.composer import Composer, message_text
from app.widgets.conversation_list import ConversationList
from app.widgets.conversation_settings import ConversationSettingsDialog
from app.widgets.elided_label import ElidedButton, ElidedLabel
from app.widgets.load_bar import LoadBar
from app.widgets.settings_dialog import SettingsDialog
from app.window_layout import STOP_SHORTCUT, LayoutMemory, SidebarFolding, fit_to_screen
from app.window_models import ModelActions
from app.window_status import StatusBar


class MainWindow(QMainWindow):
    def __init__(self, store: Store, settings: AppSettings, client: EngineClient | None = None):
        super().__init__()
        self.store, self.settings = store, settings
        self.client = client or EngineClient(settings.backend, settings.async_scheduling, parent=self,
                                             kv_cache_type=settings.kv_cache_type)
        self.chat = ChatController(store, self.client, self)
        self.library = ModelLibrary(self, lambda: self.settings.model_files)
        self.current_id: int | None = None
        self._edit_drafts: dict[int, str] = {}    # message id -> an edit of it the history refused (edit_message)
        self.setWindowTitle("Halo Chat")
        self.setWindowIcon(app_icon())
        fit_to_screen(self)
        self.setAcceptDrops(True)
        self._build()
        self.layout_memory = LayoutMemory(self, self.centralWidget(), settings)   # size, place, sidebar width
        self.models = ModelActions(self)
        self.remote = RemoteActions(self)               # servers as a model source (model library)
        self.local_server = LocalServerActions(self)    # File > Local server…
        self.discover = DiscoverActions(self, on_downloaded=lambda _path: self.library.scan(self.settings.model_folders),
                                        target=self.models.load_target)
        self.status.addPermanentWidget(self.discover.status_label)     # hub downloads (model library > Discover)
        self._build_menus()
        self._connect()
        self.refresh_conversations(select_first=True)
        if store.recovered_interrupted:
            self.status.flash(f"{store.recovered_interrupted} reply cut off last time is marked interrupted")

    # -- layout -----------------------------------------------------------------------------------
    def _build(self) -> None:
        self.sidebar = ConversationList()
        self.sidebar.setMinimumWidth(220)
        right = QWidget()
        col = QVBoxLayout(right)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(0)
        top = QWidget()
        top.setObjectName("TopBar")
        top.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        tl = QHBoxLayout(top)
        tl.setContentsMargins(20, 10, 16, 10)
        self.title_label = ElidedLabel()
        self.title_label.setObjectName("ChatTitle")
        tl.addWidget(self.title_label, 1)
        self.model_button = ElidedButton("No model loaded")
        self.model_button.setToolTip("Model library (Ctrl+L)")
        self.conv_settings_button = QPushButton("Chat settings")
        self.conv_settings_button.setToolTip("System prompt and sampling for this conversation")
        tl.addWidget(self.model_button)
        tl.addWidget(self.conv_settings_button)
        col.addWidget(top)
        self.load_bar = LoadBar()
        col.addWidget(self.load_bar)
        self.banner = Banner()
        banner_holder = QWidget()
        bl = QVBoxLayout(banner_holder)
        bl.setContentsMargins(16, 8, 16, 0)
        bl.addWidget(self.banner)
        self.banner_holder = banner_holder
        col.addWidget(banner_holder)
        self.chat_view = ChatView()
        col.addWidget(self.chat_view, 1)
        self.composer = Composer()
        col.addWidget(self.composer)
        splitter = QSplitter()
        splitter.addWidget(self.sidebar)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([260, 920])
        splitter.setHandleWidth(1)
        splitter.setCollapsible(0, True)
        self.setCentralWidget(splitter)
        self.status = StatusBar(self)
        self.setStatusBar(self.status)
        self.banner.dismiss_button.clicked.connect(self._sync_banner_holder)
        self._sync_banner_holder()

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file = bar.addMenu("&File")
        self.act_new = self._action(file, "New chat", QKeySequence.StandardKey.New, self.new_conversation)
        self._action(file, "Open GGUF…", QKeySequence.StandardKey.Open, self.models.open_file_dialog)
        self._action(file, "Model library…", "Ctrl+L", self.models.show_library)
        self._action(file, "Unload model", None, self.models.unload)
        self._action(file, "Local server…", None, self.local_server.show_panel)
        file.addSeparator()
        self._action(file, "Settings…", QKeySequence.StandardKey.Preferences, self.open_settings, "Ctrl+,")
        file.addSeparator()
        self._action(file, "Quit", QKeySequence.StandardKey.Quit, self.close, "Ctrl+Q")
        chat = bar.addMenu("&Chat")
        self._action(chat, "Rename…", "F2", lambda: self.rename_conversation(self.current_id))
        self._action(chat, "Delete…", "Ctrl+Shift+Backspace", lambda: self.delete_conversation(self.current_id))
        self._action(chat, "Chat settings…", "Ctrl+Shift+,", self.open_conversation_settings)
        self._action(chat, "Export…", "Ctrl+Shift+E", self.export_current)
        chat.addSeparator()
        self._action(chat, "Regenerate last reply", "Ctrl+R", self.regenerate_last)
        self.act_stop = self._action(chat, "Stop", STOP_SHORTCUT, self.stop)   # window-wide, any focus
        self._action(chat, "Search chats", QKeySequence.StandardKey.Find,
                     lambda: self.sidebar.search.setFocus())
        self._action(chat, "Next chat", "Ctrl+Tab", lambda: self.sidebar.step(1))
        self._action(chat, "Previous chat", "Ctrl+Shift+Tab", lambda: self.sidebar.step(-1))
        self.sidebar_folding = SidebarFolding(self, self.sidebar, bar.addMenu("&View"))
        help_menu = bar.addMenu("&Help")
        self._action(help_menu, "Diagnostics…", None, self.open_diagnostics)
        self._action(help_menu, "About Halo Chat", None, self._about)

    def _action(self, menu, text, shortcut, slot, fallback: str | None = None) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            seq = QKeySequence(shortcut)   # a StandardKey is empty on platforms without a binding
            act.setShortcut(QKeySequence(fallback) if seq.isEmpty() and fallback else seq)
        act.triggered.connect(slot)
        menu.addAction(act)
        self.addAction(act)
        return act

    def _connect(self) -> None:
        sb, c = self.sidebar, self.chat
        sb.selected.connect(self.show_conversation)
        sb.newRequested.connect(self.new_conversation)
        sb.renameRequested.connect(self.rename_conversation)
        sb.deleteRequested.connect(self.delete_conversation)
        sb.searchChanged.connect(lambda _t: self.refresh_conversations())
        self.composer.sendRequested.connect(self.send)
        self.composer.stopRequested.connect(self.stop)
        self.chat_view.regenerateRequested.connect(self.regenerate)
        self.chat_view.continueRequested.connect(self.continue_reply)
        self.chat_view.deleteRequested.connect(self.delete_message)
        self.chat_view.editRequested.connect(self.edit_message)
        self.chat_view.alternativeRequested.connect(self.show_alternative)
        self.conv_settings_button.clicked.connect(self.open_conversation_settings)
        self.model_button.clicked.connect(self.models.show_library)
        c.userMessageAdded.connect(self._on_user_message)
        c.streamStarted.connect(self._on_stream_started)
        c.streamUpdated.connect(self._on_stream_updated)
        c.streamReasoning.connect(self._on_stream_reasoning)
        c.streamFinished.connect(self._on_stream_finished)
        c.promptProgress.connect(self._on_prompt_progress)
        c.writingStarted.connect(self._on_writing_started)
        c.conversationTitled.connect(lambda _cid, _t: self.refresh_conversations())
        c.saveFailed.connect(self._on_save_failed)

    # -- conversations ----------------------------------------------------------------------------
    @history_slot
    def refresh_conversations(self, select_first: bool = False) -> None:
        convs = self.store.conversations(self.sidebar.search.text())
        if select_first and not convs and not self.sidebar.search.text():
            convs = [self._create_conversation()]
        current = self.current_id if any(c.id == self.current_id for c in convs) else None
        if select_first and current is None and convs:
            current = convs[0].id
        self.sidebar.set_conversations(convs, current, self.chat.streaming_conversations())
        if current is not None and current != self.current_id:
            self.show_conversation(current)
        elif current is None and self.current_id is None:
            self._show_no_conversation()      # e.g. the only chat a search matched was deleted
        if self.current_id is not None:
            self.title_label.setText(self.store.conversation(self.current_id).title)

    def _show_no_conversation(self) -> None:
        """The empty chat area; the next message sent starts a new chat (send)."""
        self.chat_view.clear()
        self.title_label.setText("")
        self._update_busy()
        self.status.update_context(self)

    def _create_conversation(self):
        return self.store.create_conversation(system_prompt=self.settings.system_prompt,
                                              sampling=self.settings.sampling.to_dict())

    @history_slot
    def new_conversation(self) -> None:
        self.sidebar.search.clear()
        conv = self._create_conversation()
        self.current_id = None
        self.refresh_conversations()
        self.sidebar.select(conv.id)
        self.show_conversation(conv.id)
        self.composer.edit.setFocus()

    @history_slot
    def show_conversation(self, conversation_id: int) -> None:
        conv = self.store.conversation(conversation_id)          # every read before the window changes
        messages = self.chat.messages(conversation_id)
        alternatives = {m.id: self.store.alternatives(m.id) for m in messages}
        self.current_id = conversation_id
        self.title_label.setText(conv.title)
        self.chat_view.clear()
        stream = self.chat.stream_for(conversation_id)
        for m in messages:
            live = stream is not None and m.id == stream.message_id
            view = self.chat_view.add_message(m.id, m.role, stream.text if live else m.content, m.state, m.error,
                                              reasoning=stream.reasoning if live else m.reasoning)
            if not live:                 # a live reply keeps its streaming detail ("writing…"; progress replaces it)
                view.set_detail(_usage_text(m.usage))
            view.set_truncated(m.state == "complete" and m.usage.get("finish_reason") == "length")
            view.set_alternatives(*alternatives[m.id])
        self.chat_view.refresh_actions()
        self.chat_view.scroll_to_bottom()
        self._update_busy()
        self.status.update_context(self)

    @history_slot
    def rename_conversation(self, conversation_id: int | None) -> None:
        if conversation_id is None:
            return
        conv = self.store.conversation(conversation_id)
        title, ok = QInputDialog.getText(self, "Rename conversation", "Title:", text=conv.title)
        if ok:
            self.store.rename(conversation_id, title)
            self.refresh_conversations()

    @history_slot
    def delete_conversation(self, conversation_id: int | None) -> None:
        if conversation_id is None:
            return
        conv = self.store.conversation(conversation_id)
        box = QMessageBox(QMessageBox.Icon.Question, "Delete conversation",
                          f"Delete “{conv.title}” and all its messages?\nThis cannot be undone.",
                          QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel, self)
        box.setTextFormat(Qt.TextFormat.PlainText)       # the title is the user's (or a pasted document's) text
        box.setDefaultButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        if box.clickedButton() is not box.button(QMessageBox.StandardButton.Yes):
            return
        self.chat.stop(conversation_id)
        self.store.delete_conversation(conversation_id)
        if conversation_id == self.current_id:
            self.current_id = None
        self.refresh_conversations(select_first=True)

    def conversation_settings(self, conversation_id: int) -> tuple[str, Sampling]:
        conv = self.store.conversation(conversation_id)
        return conv.system_prompt, Sampling.from_dict(conv.sampling, self.settings.sampling)

    @history_slot
    def open_conversation_settings(self) -> None:
        if self.current_id is None:
            return
        conv = self.store.conversation(self.current_id)
        prompt, sampling = self.conversation_settings(self.current_id)
        model = self.chat.model
        dlg = ConversationSettingsDialog(conv.title, prompt, sampling, self.settings.sampling,
                                         self.settings.system_prompt, self, template_options=conv.template_options,
                                         supported=model.template_options if model else ())
        if dlg.exec():
            prompt, sampling = dlg.values()
            self.store.set_conversation_settings(self.current_id, prompt, sampling.to_dict(),
                                                 {**conv.template_options, **dlg.template_options()})

    # -- turns ------------------------------------------------------------------------------------
    @history_slot
    def send(self, text: str) -> None:
        if self.current_id is None:
            self.new_conversation()
        if self.current_id is None or self.chat.model is None:    # no chat (the history refused it) or no model
            self.composer.edit.setPlainText(text)
            if self.chat.model is None:
                self.models.explain_no_model()
            return
        prompt, sampling = self.conversation_settings(self.current_id)
        try:
            self.chat.send(self.current_id, text, sampling, prompt)
        except sqlite3.Error as e:
            self.composer.edit.setPlainText(text)     # not stored: the words stay, to send once it can be
            self._on_save_failed(e, kept=False)

    @history_slot
    def regenerate(self, message_id: int) -> None:
        if self.current_id is None or self.chat.model is None:
            self.models.explain_no_model()
            return
        prompt, sampling = self.conversation_settings(self.current_id)
        self.chat_view.remove_message(message_id)
        self.chat.regenerate(self.current_id, message_id, sampling, prompt)
        self._show_stored_unless_streaming()          # the history refused the new reply: the old one stays

    @history_slot
    def edit_message(self, message_id: int) -> None:
        """Edit a user message and send it again; the original and the turns after it stay, one ‹ › away."""
        if self.current_id is None or self.chat.stream_for(self.current_id) is not None:
            return
        if self.chat.model is None:
            self.models.explain_no_model()
            return
        original = self.store.message(message_id)
        draft = self._edit_drafts.pop(message_id, original.content)
        typed, ok = QInputDialog.getMultiLineText(self, "Edit message", "Send instead:", draft)
        if not ok or not typed.strip() or (text := message_text(typed)) == original.content:
            return
        prompt, sampling = self.conversation_settings(self.current_id)
        try:
            self.chat.edit_and_resend(self.current_id, message_id, text, sampling, prompt)
        except sqlite3.Error as e:
            # Not stored: the edit waits for this message's next Edit, as a refused send waits in the composer.
            self._edit_drafts[message_id] = text
            self._on_save_failed(e, kept=False, note="Your edited message is kept: click Edit on it to send it again.")
            return
        self.show_conversation(self.current_id)

    @history_slot
    def show_alternative(self, message_id: int, step: int) -> None:
        if self.current_id is None or self.chat.stream_for(self.current_id) is not None:
            return
        self.store.show_alternative(message_id, step)
        self.show_conversation(self.current_id)

    @history_slot
    def delete_message(self, message_id: int) -> None:
        """One message out of the conversation, after asking (a reply being written is stopped first)."""
        if self.current_id is None:
            return
        answer = QMessageBox.question(self, "Delete message", "Delete this message?\nThis cannot be undone.",
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
                                      QMessageBox.StandardButton.Cancel)
        if answer != QMessageBox.StandardButton.Yes:
            return
        stream = self.chat.stream_for(self.current_id)
        if stream is not None and stream.message_id == message_id:
            return                                   # Delete is disabled on the streaming reply
        self.store.delete_message(message_id)
        self.show_conversation(self.current_id)          # an alternative may take its place
        self.status.update_context(self)

    def export_conversation(self, conversation_id: int, path) -> None:
        export(self.store.conversation(conversation_id), self.store.messages(conversation_id), path)

    def suggested_export_name(self, conversation_id: int) -> str:
        """The file name Export offers for a conversation: its title made a valid file name, as Markdown."""
        return file_stem(self.store.conversation(conversation_id).title) + ".md"

    @history_slot
    def export_current(self) -> None:
        if self.current_id is None:
            return
        name = self.suggested_export_name(self.current_id)
        path, _filter = QFileDialog.getSaveFileName(self, "Export chat", name, ";;".join(FORMATS.values()))
        if path:
            try:
                self.export_conversation(self.current_id, path)
            except (OSError, ValueError) as e:
                QMessageBox.warning(self, "Export failed", f"The chat was not exported: {e}")

    @history_slot
    def continue_reply(self, message_id: int) -> None:
        if self.current_id is None or self.chat.model is None:
            self.models.explain_no_model()
            return
        prompt, sampling = self.conversation_settings(self.current_id)
        if view := self.chat_view.view(message_id):
            view.set_truncated(False)
            view.set_state("streaming")
        self.chat.continue_reply(self.current_id, message_id, sampling, prompt)
        self._show_stored_unless_streaming()

    def _show_stored_unless_streaming(self) -> None:
        """After a reply was asked for: where none started (the history refused its row), the window goes back
        to what is stored."""
        if self.chat.stream_for(self.current_id) is None:
            self.show_conversation(self.current_id)

    def regenerate_last(self) -> None:
        views = self.chat_view.views()
        if views and views[-1].role == "assistant" and self.chat.stream_for(self.current_id) is None:
            self.regenerate(views[-1].message_id)

    def stop(self) -> None:
        """Esc (any focus) and the composer's Stop: stops the current chat's reply, and cancels a model load in
        progress as the load bar's Cancel does."""
        if self.client.is_loading:
            self.client.cancel_load()
        if self.current_id is not None:
            self.chat.stop(self.current_id)

    @history_slot
    def _on_user_message(self, conversation_id: int, message) -> None:
        if conversation_id == self.current_id:
            self.chat_view.add_message(message.id, "user", message.content)
            self.chat_view.scroll_to_bottom()
            self.status.update_context(self)

    @history_slot
    def _on_stream_started(self, conversation_id: int, message_id: int) -> None:
        if conversation_id == self.current_id and self.chat_view.view(message_id) is None:   # not a Continue
            self.chat_view.add_message(message_id, "assistant", "", "streaming")
        self._update_busy()
        self.refresh_conversations()

    def _on_stream_updated(self, conversation_id: int, message_id: int, text: str) -> None:
        if conversation_id == self.current_id and (view := self.chat_view.view(message_id)):
            view.set_text(text)

    def _on_stream_reasoning(self, conversation_id: int, message_id: int, text: str) -> None:
        if conversation_id == self.current_id and (view := self.chat_view.view(message_id)):
            view.set_reasoning(text)

    def _on_prompt_progress(self, conversation_id: int, message_id: int, processed: int, total: int) -> None:
        if conversation_id == self.current_id and (view := self.chat_view.view(message_id)):
            view.set_detail(f"Reading the conversation: {processed:,} / {total:,} tokens")

    def _on_writing_started(self, conversation_id: int, message_id: int) -> None:
        if conversation_id == self.current_id and (view := self.chat_view.view(message_id)):
            view.set_state("streaming")      # a streaming reply's own detail ("writing…") replaces the progress

    @history_slot
    def _on_stream_finished(self, conversation_id: int, message_id: int, fin) -> None:
        if conversation_id == self.current_id and (view := self.chat_view.view(message_id)):
            msg = self.chat.message(message_id)
            view.set_text(msg.content)
            view.set_state(msg.state, msg.error)
            view.set_reasoning(msg.reasoning)
            view.set_truncated(msg.state == "complete" and fin.reason == "length")
            view.set_alternatives(*self.store.alternatives(message_id))
            view.set_detail(_usage_text(msg.usage))
        if fin.reason == "error":
            self.models.show_generation_error(fin.error or "unknown error", getattr(fin, "error_type", ""))
        self._update_busy()
        self.refresh_conversations()
        self.status.update_usage(fin.usage)
        self.status.update_context(self)

    def _on_save_failed(self, error: sqlite3.Error, kept: bool = True, note: str = "") -> None:
        """The one message for the history failing in use. `kept`: what was not written stays here and is saved
        at a later try (replies); else what the user did did not happen, and the window shows what is stored.
        `note`: where the user's words wait, when they are not in sight (an edit's)."""
        path = self.store.path
        if is_damage(error):
            self.store.mark_damaged(error)            # the next start checks the file and offers a way out
            self.show_banner("Your chat history is damaged", f"The history file {path} is damaged: {error}.\n\n"
                             "Chats that can still be read stay usable, and nothing has been deleted. To go on with "
                             "a sound history, quit Halo Chat and start it again: it checks the file and offers to "
                             "keep it aside, renamed, and start an empty history." + (f" {note}" if note else ""))
            return
        outcome = ("What you see stays in this window, and Halo Chat saves it as soon as the history can be "
                   "written again" if kept else "That change was not made; the window shows what is saved")
        self.show_banner("Your chat can't be saved", f"The history file {path} refused a write: {error}.\n\n"
                         f"{outcome}. {note + ' ' if note else ''}{_what_to_do(error, path)}")

    def _update_busy(self) -> None:
        busy = self.current_id is not None and self.chat.stream_for(self.current_id) is not None
        self.composer.set_streaming(busy)
        self.chat_view.set_busy(busy)

    # -- settings, diagnostics --------------------------------------------------------------------
    def open_settings(self) -> None:
        dlg = SettingsDialog(self.settings, self)
        if dlg.exec():
            self.apply_settings(dlg)

    def apply_settings(self, dlg: SettingsDialog) -> None:
        s = self.settings
        before = (s.backend, s.async_scheduling, s.kv_cache_type, s.model_folders)
        dlg.apply()
        apply_theme(QApplication.instance(), s.theme)
        if before[:3] != (s.backend, s.async_scheduling, s.kv_cache_type):
            self.models.reconfigure_engine()      # reloads the model, with the new context too
        else:
            self.models.offer_reload_for_context()
        if before[3] != s.model_folders:
            self.library.scan(self.settings.model_folders)
        self.status.update_engine(self)
        self.models.target_changed()           # an open library's estimate and Discover's verdicts plan the
        self.discover.target_changed()         # new context and KV cache type (the library: and backend)

    def open_diagnostics(self) -> None:
        """Opens app/diagnostics_view.py's DiagnosticsView when that module exists (built separately)."""
        try:
            from app import diagnostics_view
        except ImportError:
            QMessageBox.information(self, "Diagnostics", "The diagnostics view is not part of this build yet.")
            return
        view = diagnostics_view.DiagnosticsView(client=self.client, parent=self,
                                                backend_setting=self.settings.backend,
                                                async_setting=self.settings.async_scheduling)
        view.setWindowFlag(Qt.WindowType.Window, True)
        view.show()
        self._diagnostics = view

    def _about(self) -> None:
        QMessageBox.about(self, "About Halo Chat", "Halo Chat: chat with local language models on your own "
                          "machine, with its own inference engine.")

    def _sync_banner_holder(self) -> None:
        self.banner_holder.setVisible(self.banner.isVisibleTo(self.banner_holder))

    def show_banner(self, title: str, body: str, actions=()) -> None:
        self.banner.show_message(title, body, actions)
        self._sync_banner_holder()

    # -- drag and drop ----------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:
        if any(u.isLocalFile() for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:
        paths = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.models.open_path(paths[0])

    def closeEvent(self, event) -> None:
        self.chat.stop_all()
        self.chat.stop_saving()
        if self.chat.unsaved_replies() and not self._close_unsaved():
            event.ignore()
            if self.current_id is not None:
                self.show_conversation(self.current_id)    # its replies are stopped now
            return
        self.remote.shutdown()
        self.discover.shutdown()
        self.local_server.stop()
        self.client.shutdown()
        super().closeEvent(event)

    def _close_unsaved(self) -> bool:
        """Replies the history still refuses would be lost by closing: the user decides (default: stay open)."""
        answer = QMessageBox.warning(self, "Replies not saved",
                                     f"{self.chat.unsaved_replies()} replies could not be saved to the history. "
                                     "Closing now loses them.\n\nClose anyway?",
                                     QMessageBox.StandardButton.Close | QMessageBox.StandardButton.Cancel,
                                     QMessageBox.StandardButton.Cancel)
        return answer == QMessageBox.StandardButton.Close


def _what_to_do(error: sqlite3.Error, path) -> str:
    """Advice for a refused write, from SQLite's reason."""
    name = getattr(error, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
        return f"Another program is using {path}: close it (a backup or sync tool, a database browser)."
    if name.startswith("SQLITE_FULL"):
        return f"Free some disk space on the drive of {path.parent}."
    return f"Free some disk space, or make {path.parent} writable."


def _usage_text(usage: dict) -> str:
    """A reply's detail line from what it stored (ChatController._on_finished): its length and speed, and what
    the context overflow policy left out of its prompt (engine.context_fit); "" when there is nothing to say."""
    tokens, turns = usage.get("generated_tokens", 0), usage.get("turns_left_out", 0)
    rate = usage.get("decode_tokens_per_s", 0.0)
    parts = [f"{tokens} tokens" + (f" · {rate:.1f} tok/s" if rate else "")] if tokens else []
    if turns:
        parts.append(f"{turns} earlier turn{'s' if turns != 1 else ''} left out")
    if usage.get("system_prompt_left_out"):
        parts.append("the system prompt left out")
    return " · ".join(parts)
