"""`python -m engine chat`: an interactive streaming REPL over the Engine. /exit quits; Ctrl-C stops a reply.

A reply's reasoning (a <think> block, gpt-oss's analysis channel: engine.reasoning) streams under a
"Thinking:" line and is kept out of the history, as the app keeps it out of the next turn's prompt."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .api import ChatMessage, Finished, GenerateRequest, SamplingParams
from .engine import Engine
from .model.arch import DEFAULT_KV_CACHE_TYPE

THINKING_HEADER = "Thinking:"
ANSWER_HEADER = "Answer:"


@dataclass
class TemplateSwitches:
    """The chat-template switches given on the command line; None: the template's default."""
    enable_thinking: bool | None = None
    reasoning_effort: str | None = None


def run_chat(path: Path, params: SamplingParams, system: str | None,
             switches: TemplateSwitches | None = None, kv_cache_type: str = DEFAULT_KV_CACHE_TYPE) -> int:
    switches = switches or TemplateSwitches()
    engine = Engine(kv_cache_type=kv_cache_type)
    try:
        info = engine.load(path).result()
        mode = "chat" if info.has_chat_template else "completion (no chat template: each line is continued)"
        print(f"{info.name} ({info.architecture}, {info.quantization}) - {mode}. /exit to quit, Ctrl-C stops a reply.")
        for name in ("enable_thinking", "reasoning_effort"):
            if getattr(switches, name) is not None and name not in info.template_options:
                print(f"note: this model's chat template does not read {name}; the switch is ignored",
                      file=sys.stderr)
        history: list[ChatMessage] = [ChatMessage("system", system)] if system else []
        while True:
            try:
                line = input("> ")
            except (EOFError, KeyboardInterrupt):
                print()
                return 0
            if line.strip() in ("/exit", "/quit"):
                return 0
            if not line.strip():
                continue
            if info.has_chat_template:
                history.append(ChatMessage("user", line))
                request = GenerateRequest(messages=tuple(history), params=params,
                                          enable_thinking=switches.enable_thinking,
                                          reasoning_effort=switches.reasoning_effort)
            else:
                request = GenerateRequest(prompt=line, params=params)
            reply = _stream(engine, request)
            if info.has_chat_template:
                history.append(ChatMessage("assistant", reply))
    finally:
        engine.shutdown()


class _ReplyPrinter:
    """Prints reasoning under THINKING_HEADER and the answer after it (under ANSWER_HEADER when there was
    reasoning), as the pieces stream."""

    def __init__(self):
        self.thinking = self.answering = False

    def reasoning(self, text: str) -> None:
        if not text:
            return
        if not self.thinking:
            self.thinking = True
            print(THINKING_HEADER)
        print(text, end="", flush=True)

    def answer(self, text: str) -> None:
        if not text:
            return
        if self.thinking and not self.answering:
            print(f"\n{ANSWER_HEADER}")
        self.answering = True
        print(text, end="", flush=True)


def _stream(engine: Engine, request: GenerateRequest) -> str:
    """Stream one reply; returns its answer (the reasoning is shown, never returned)."""
    handle = engine.submit(request)
    parts: list[str] = []
    out = _ReplyPrinter()
    events = handle.events()
    while True:
        try:
            event = next(events)
        except StopIteration:
            break
        except KeyboardInterrupt:
            handle.abort()             # the interrupted generator is closed: drain a fresh one to Finished
            events = handle.events()
            continue
        if isinstance(event, Finished):
            if event.reason == "error":
                print(f"\n[error: {event.error}]", file=sys.stderr)
            elif event.reason == "abort":
                print("\n[stopped]", file=sys.stderr)
            break
        out.reasoning(event.reasoning)
        out.answer(event.text)
        parts.append(event.text)
    print()
    return "".join(parts)
