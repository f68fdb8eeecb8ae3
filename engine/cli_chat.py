"""`python -m engine chat`: an interactive streaming REPL over the Engine. /exit quits; Ctrl-C stops a reply.
A reply's thinking (TextDelta.reasoning) streams after a "thinking:" label, then the answer after "answer:"; only
the answer goes into the history (the templates leave past thinking out of the prompt)."""
from __future__ import annotations

import sys
from pathlib import Path

from .api import ChatMessage, Finished, GenerateRequest, SamplingParams, TextDelta
from .engine import Engine


def run_chat(path: Path, params: SamplingParams, system: str | None) -> int:
    engine = Engine()
    try:
        info = engine.load(path).result()
        mode = "chat" if info.has_chat_template else "completion (no chat template: each line is continued)"
        print(f"{info.name} ({info.architecture}, {info.quantization}) - {mode}. /exit to quit, Ctrl-C stops a reply.")
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
                request = GenerateRequest(messages=tuple(history), params=params)
            else:
                request = GenerateRequest(prompt=line, params=params)
            reply = _stream(engine, request)
            if info.has_chat_template:
                history.append(ChatMessage("assistant", reply))
    finally:
        engine.shutdown()


def _stream(engine: Engine, request: GenerateRequest) -> str:
    handle = engine.submit(request)
    parts: list[str] = []
    events = handle.events()
    thinking = False
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
        if not isinstance(event, TextDelta):
            continue
        if event.reasoning:
            if not thinking:
                print("thinking: ", end="")
                thinking = True
            print(event.reasoning, end="", flush=True)
        if event.text:
            if thinking:
                print("\nanswer: ", end="")
                thinking = False
            parts.append(event.text)
            print(event.text, end="", flush=True)
    print()
    return "".join(parts)
