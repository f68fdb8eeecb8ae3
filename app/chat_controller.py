"""Sending, streaming, stopping and regenerating replies; the one place that writes replies to the store.

Order of a turn (SAFETY.md): user message committed -> reply row "streaming" -> submit -> partial text
saved every SAVE_INTERVAL_S -> final text and state ("complete", "stopped", "error") written at Finished.
Streams of different conversations may run at once; the window only shows the current one.
A write the history refuses (disk full, read-only folder, another program's lock) is reported (saveFailed), never
raised into the event loop: the reply goes on, its text stays here, and a later save tries again. Saves that will be
tried again wait only briefly for another program's lock (Store.brief_lock_waits), and after a refusal the save timer
backs off, so a history that stays locked never stalls the GUI thread for seconds, nor often.
"""
from __future__ import annotations

import os
import signal
import sqlite3
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QObject, QTimer, Signal

from app.engine_client import EngineClient
from app.markdown_prep import plain_title
from app.settings import Sampling
from app.store import Message, Store
from engine.api import ChatMessage, Finished, GenerateRequest

SAVE_INTERVAL_S = 0.5
MAX_RETRY_GAP_TICKS = 16     # after refused writes the save timer tries again 1, 2, 4 ... 16 ticks (8 s) apart
_STATE_FOR_REASON = {"stop": "complete", "length": "complete", "abort": "stopped", "error": "error"}
# Test hook for the crash test: the process kills itself after this many delta signals of one reply.
_KILL_AFTER_DELTAS = int(os.environ.get("HALO_TEST_KILL_AFTER_DELTAS", "0") or 0)


@dataclass
class Stream:
    conversation_id: int
    message_id: int
    request_id: str
    text: str = ""
    reasoning: str = ""              # the reply's thinking so far (TextDelta.reasoning), kept apart from text
    saved_text: str = ""
    saved_reasoning: str = ""
    deltas: int = 0
    writing: bool = False            # this request's first text or reasoning arrived: its prompt is read
    started: float = field(default_factory=time.monotonic)


class ChatController(QObject):
    streamStarted = Signal(int, int)            # conversation id, reply message id
    streamUpdated = Signal(int, int, str)       # conversation id, reply message id, whole text so far
    streamReasoning = Signal(int, int, str)     # conversation id, reply message id, whole reasoning so far
    streamFinished = Signal(int, int, object)   # conversation id, reply message id, Finished
    userMessageAdded = Signal(int, object)      # conversation id, Message
    conversationTitled = Signal(int, str)
    promptProgress = Signal(int, int, int, int)  # conversation id, reply message id, prompt tokens processed, total
    writingStarted = Signal(int, int)           # conversation id, reply message id: once, at its first output;
                                                # no promptProgress for it after this one
    saveFailed = Signal(object, bool)           # a refused write's sqlite3.Error; kept: its text stays here for a
                                                # later try (retries: told once until one works), else it did not happen

    def __init__(self, store: Store, client: EngineClient, parent: QObject | None = None):
        super().__init__(parent)
        self.store = store
        self.client = client
        self.source = client          # where new replies go: the local engine or a remote server's model
        self._sources: dict[str, object] = {}    # request id -> the source streaming it (stop goes there)
        self._by_request: dict[str, Stream] = {}
        self._listening: list = []
        self._listen(client)
        client.loaded.connect(lambda _info: self.use_source(client))   # loading a local model picks it
        self._saver = QTimer(self, interval=int(SAVE_INTERVAL_S * 1000))
        self._saver.timeout.connect(self._on_save_tick)
        self._unsaved: dict[int, dict] = {}    # reply id -> its final fields (finish_reply's) not yet written
        self._save_failing = False
        self._retry_gap = 1                    # ticks to skip after the next refused tick (doubles up to the max)
        self._ticks_to_skip = 0
        self.last_usage = None

    # -- where replies come from ------------------------------------------------------------------
    def use_source(self, source) -> None:
        """`source`: the EngineClient or a RemoteChatClient (both: `model`, `submit`, `abort`, signals
        `delta` and `finished`). Streams already running finish where they started."""
        if not any(s is source for s in self._listening):
            self._listen(source)
        self.source = source

    def _listen(self, source) -> None:
        source.delta.connect(self._on_delta)
        if hasattr(source, "reasoning"):         # sources that stream a reply's thinking apart
            source.reasoning.connect(self._on_reasoning)
        source.finished.connect(self._on_finished)
        if hasattr(source, "promptProgress"):      # the local engine reports prefill; servers do not
            source.promptProgress.connect(self._on_prompt_progress)
        self._listening.append(source)

    @property
    def model(self):
        """The ModelInfo new replies use (None: nothing to chat with)."""
        return self.source.model

    # -- queries ----------------------------------------------------------------------------------
    def stream_for(self, conversation_id: int) -> Stream | None:
        return next((s for s in self._by_request.values() if s.conversation_id == conversation_id), None)

    def streaming_conversations(self) -> set[int]:
        return {s.conversation_id for s in self._by_request.values()}

    def message(self, message_id: int) -> Message:
        """A message as the user got it: the stored one, with the final text a refused write still holds here."""
        return replace(self.store.message(message_id), **self._unsaved.get(message_id, {}))

    def messages(self, conversation_id: int) -> list[Message]:
        """The conversation (Store.messages) with the final text refused writes still hold here."""
        return [replace(m, **self._unsaved.get(m.id, {})) for m in self.store.messages(conversation_id)]

    def unsaved_replies(self) -> int:
        return len(self._unsaved)

    # -- actions ----------------------------------------------------------------------------------
    def send(self, conversation_id: int, text: str, sampling: Sampling, system_prompt: str) -> Message:
        """Commits the user's message, then starts the reply. Returns the user's stored message. Raises
        sqlite3.Error only where the history refuses the message: then nothing was stored or started. Once it
        is stored, what is refused after it (the title, the reply's row) is reported, never raised: the caller
        would give the words back to the user, who would send them twice."""
        user = self.store.add_message(conversation_id, "user", text)
        self.userMessageAdded.emit(conversation_id, user)
        self._title_from(conversation_id, text)
        self._start_reply(conversation_id, sampling, system_prompt)
        return user

    def _title_from(self, conversation_id: int, text: str) -> None:
        """A "New chat" takes its title from its first message; a refused rename leaves "New chat" (told)."""
        try:
            if self.store.conversation(conversation_id).title != "New chat":
                return
            title = plain_title(text)
            self.store.rename(conversation_id, title)
        except sqlite3.Error as e:
            self.saveFailed.emit(e, False)
            return
        self.conversationTitled.emit(conversation_id, title)

    def regenerate(self, conversation_id: int, message_id: int, sampling: Sampling, system_prompt: str) -> None:
        """A new answer to the last reply's question, beside it: the earlier one stays as an alternative."""
        messages = self.messages(conversation_id)
        if not messages or messages[-1].id != message_id or messages[-1].role != "assistant":
            raise ValueError("only the last reply of a conversation can be regenerated")
        if self.stream_for(conversation_id) is not None:
            return
        self._start_reply(conversation_id, sampling, system_prompt, alternative_to=messages[-1])

    def edit_and_resend(self, conversation_id: int, message_id: int, text: str, sampling: Sampling,
                        system_prompt: str) -> Message:
        """The edited user message goes beside the original (which keeps its later turns as an alternative
        branch), then a reply to it starts. Returns the new message."""
        original = self.store.message(message_id)
        if original.role != "user" or original.conversation_id != conversation_id:
            raise ValueError("only a user message of this conversation can be edited")
        if self.stream_for(conversation_id) is not None:
            raise ValueError("stop the reply being written before editing")
        edited = self.store.add_message(conversation_id, "user", text, parent_id=original.parent_id)
        self._start_reply(conversation_id, sampling, system_prompt)
        return edited

    def continue_reply(self, conversation_id: int, message_id: int, sampling: Sampling, system_prompt: str) -> None:
        """Goes on writing the conversation's last reply (cut off by the token limit) into the same message."""
        messages = self.messages(conversation_id)
        if not messages or messages[-1].id != message_id or messages[-1].role != "assistant":
            raise ValueError("only the last reply of a conversation can be continued")
        if self.stream_for(conversation_id) is not None:
            return
        self._start_reply(conversation_id, sampling, system_prompt, continue_message=messages[-1])

    def stop(self, conversation_id: int) -> None:
        stream = self.stream_for(conversation_id)
        if stream is not None:
            self._sources.get(stream.request_id, self.client).abort(stream.request_id)

    def stop_all(self) -> None:
        for stream in list(self._by_request.values()):
            self._sources.get(stream.request_id, self.client).abort(stream.request_id)

    # -- streaming --------------------------------------------------------------------------------
    def _start_reply(self, conversation_id: int, sampling: Sampling, system_prompt: str,
                     continue_message: Message | None = None, alternative_to: Message | None = None) -> None:
        source = self.source
        model = source.model
        history = self.messages(conversation_id)
        if alternative_to is not None:           # the question it answers, without the reply it stands beside
            history = history[:history.index(alternative_to)]
        request = build_request(history, sampling, system_prompt,
                                chat=model.has_chat_template if model else True,
                                template_options=self.store.conversation(conversation_id).template_options,
                                supported=model.template_options if model else (),
                                continue_last=continue_message is not None)
        try:
            if continue_message is None:
                parent = alternative_to.parent_id if alternative_to is not None else history[-1].id if history else None
                reply = self.store.begin_reply(conversation_id, model=model.name if model else "", parent_id=parent)
                stream = Stream(conversation_id, reply.id, request.request_id)
            else:
                reply = self.store.resume_reply(continue_message.id)
                stream = Stream(conversation_id, reply.id, request.request_id, text=reply.content,
                                reasoning=reply.reasoning, saved_text=reply.content, saved_reasoning=reply.reasoning)
        except sqlite3.Error as e:             # no row to write the reply into: it does not start
            self._save_failing = True
            self.saveFailed.emit(e, False)     # the user asked for this reply: told every time
            return
        self._by_request[request.request_id] = stream
        self._saver.start()
        self._sources[request.request_id] = source
        self.streamStarted.emit(conversation_id, reply.id)
        source.submit(request)

    def _on_delta(self, request_id: str, text: str) -> None:
        stream = self._by_request.get(request_id)
        if stream is None:
            return
        self._start_writing(stream)
        stream.text += text
        stream.deltas += 1
        self.streamUpdated.emit(stream.conversation_id, stream.message_id, stream.text)
        if _KILL_AFTER_DELTAS and stream.deltas >= _KILL_AFTER_DELTAS:
            os.kill(os.getpid(), signal.SIGKILL)   # no last save: the test sees what the timer saved

    def _on_reasoning(self, request_id: str, text: str) -> None:
        stream = self._by_request.get(request_id)
        if stream is None:
            return
        self._start_writing(stream)
        stream.reasoning += text
        self.streamReasoning.emit(stream.conversation_id, stream.message_id, stream.reasoning)

    def _on_prompt_progress(self, request_id: str, processed: int, total: int) -> None:
        stream = self._by_request.get(request_id)
        if stream is not None and not stream.writing:
            self.promptProgress.emit(stream.conversation_id, stream.message_id, processed, total)

    def _start_writing(self, stream: Stream) -> None:
        """The prompt is read once output comes (the engine reports no progress for its last chunk, whose
        end is the first token); progress that arrives later, in the same tick as output, is stale."""
        if not stream.writing:
            stream.writing = True
            self.writingStarted.emit(stream.conversation_id, stream.message_id)

    def _on_save_tick(self) -> None:
        """The save timer. While the history refuses writes, ticks are skipped, more of them after each refused
        tick (up to MAX_RETRY_GAP_TICKS), so a lock held elsewhere for minutes costs a brief wait now and then."""
        if self._ticks_to_skip:
            self._ticks_to_skip -= 1
            return
        self.save_partials()
        if self._save_failing:
            self._ticks_to_skip = self._retry_gap
            self._retry_gap = min(2 * self._retry_gap, MAX_RETRY_GAP_TICKS)
        else:
            self._retry_gap = 1

    def save_partials(self) -> None:
        """Writes finished replies a refused write left here, then what changed of each live reply. Tries at
        once (a reply's end, closing); the timer's ticks back off first (_on_save_tick)."""
        for message_id, final in list(self._unsaved.items()):
            if self._write(self.store.finish_reply, message_id, **final):
                del self._unsaved[message_id]
        for stream in self._by_request.values():
            if (stream.text, stream.reasoning) != (stream.saved_text, stream.saved_reasoning):
                if self._write(self.store.save_partial, stream.message_id, stream.text, stream.reasoning,
                               will_retry=True):
                    stream.saved_text, stream.saved_reasoning = stream.text, stream.reasoning
        if not self._by_request and not self._unsaved:
            self._saver.stop()

    def stop_saving(self) -> None:
        """At close: every live reply is written as "stopped" (no Finished came: the stored usage stays, a
        continued reply's), with one last try for any that a refused write left here."""
        for stream in self._by_request.values():
            self._unsaved[stream.message_id] = {"content": stream.text, "state": "stopped",
                                                "reasoning": stream.reasoning}
        self._by_request.clear()
        self.save_partials()

    def _write(self, write, *args, will_retry: bool = False, **kwargs) -> bool:
        """One store write; False where the history refuses it (the caller keeps the text to try again).
        `will_retry`: a partial save, soon superseded. It, and every retry once a write was refused, waits only
        briefly for another program's lock; a final text, first tried, may wait the full LOCK_WAIT_S once."""
        waits = self.store.brief_lock_waits() if will_retry or self._save_failing else nullcontext()
        try:
            with waits:
                write(*args, **kwargs)
        except sqlite3.Error as e:             # full disk, read-only file, a lock held elsewhere, damage
            self._refused(e)
            return False
        self._save_failing = False
        return True

    def _refused(self, error: sqlite3.Error) -> None:
        if not self._save_failing:             # told once, not at every retry
            self._save_failing = True
            self.saveFailed.emit(error, True)

    def _on_finished(self, fin: Finished) -> None:
        stream = self._by_request.pop(fin.request_id, None)
        self._sources.pop(fin.request_id, None)
        if stream is None:
            return
        state = _STATE_FOR_REASON.get(fin.reason, "complete")
        usage = {"prompt_tokens": fin.usage.prompt_tokens, "generated_tokens": fin.usage.generated_tokens,
                 "decode_tokens_per_s": fin.usage.decode_tokens_per_s,
                 "time_to_first_token_s": fin.usage.time_to_first_token_s, "finish_reason": fin.reason,
                 "turns_left_out": fin.turns_left_out, "system_prompt_left_out": fin.system_prompt_left_out}
        self._unsaved[stream.message_id] = {"content": stream.text, "state": state, "usage": usage,
                                            "error": fin.error or "", "reasoning": stream.reasoning}
        self.save_partials()                   # writes it (a refused write keeps it for the next try)
        if fin.reason != "error":
            self.last_usage = fin.usage
        self.streamFinished.emit(stream.conversation_id, stream.message_id, fin)


def build_request(history: list[Message], sampling: Sampling, system_prompt: str, chat: bool = True,
                  template_options: dict | None = None, supported: tuple[str, ...] = (),
                  continue_last: bool = False) -> GenerateRequest:
    """Chat models get the whole conversation (answers only: a reply's reasoning is never sent back, as the
    templates expect); base models (no template) continue the last user text. `template_options`: the
    chat's switches, passed only where the model's template reads them (`supported`, ModelInfo)."""
    params = sampling.to_params()
    options = {k: v for k, v in (template_options or {}).items() if k in supported}
    if not chat:
        last_user = next((m.content for m in reversed(history) if m.role == "user"), "")
        if continue_last:                        # a base model simply goes on from the text so far
            last_user += history[-1].content
        return GenerateRequest(prompt=last_user, params=params, report_progress=True)
    messages: list[ChatMessage] = []
    if system_prompt.strip():
        messages.append(ChatMessage("system", system_prompt.strip()))
    for m in history:
        if m.role == "assistant" and (m.state == "error" or not m.content) and not continue_last:
            continue   # a failed or empty reply is not something the model said
        messages.append(ChatMessage(m.role, m.content))
    return GenerateRequest(messages=tuple(messages), params=params, report_progress=True,
                           context_overflow=sampling.context_overflow, continue_final_message=continue_last,
                           **options)
