"""A reply's reasoning ("thinking") apart from its answer, as the text streams.

Reasoning models write their chain of thought before the answer, marked in one of two ways:
- think tags (Qwen3, Qwen3.5, DeepSeek-R1 distills): `<think> ... </think>` then the answer. When the
  chat template already opened the block in the generation prompt (Qwen3.5 with thinking on writes
  `<think>\\n` there), the reply starts inside the reasoning and only the closing tag appears.
- channels (gpt-oss's harmony format) are special tokens, which the detokenizer never shows as text:
  a parser for them works on token ids and registers itself in `PARSERS` (see `reasoning_parser`).

Contract: one parser per request; `feed(token_id, text) -> (reasoning, answer)` with the text the
detokenizer produced for that id (may be ""); `flush()` at the end. Concatenating every returned
piece gives back the whole text minus the markers. Text that could be the start of a marker is held
back until it is decided, so a tag split over several tokens never leaks into either channel.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from engine.harmony import CHANNEL, HarmonyParser

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


class ReasoningParser(Protocol):
    def feed(self, token_id: int, text: str) -> tuple[str, str]: ...

    def flush(self) -> tuple[str, str]: ...


def _held_prefix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:n]):
            return n
    return 0


class ThinkTagParser:
    """`<think>…</think>` in the text stream. Only the first block counts as reasoning: a model that
    writes the tag again inside its answer (quoting it, say) keeps it as answer text."""

    def __init__(self, starts_inside: bool = False):
        self.inside = starts_inside
        self.done = False            # the reasoning block has closed
        self.pending = ""
        self.seen_text = starts_inside
        self.answer_started = False  # blank lines between the closing tag and the answer are dropped

    def feed(self, token_id: int, text: str) -> tuple[str, str]:
        self.pending += text
        reasoning, answer = [], []
        while self.pending:
            if self.done:
                if not self.answer_started:
                    self.pending = self.pending.lstrip()
                    self.answer_started = bool(self.pending)
                answer.append(self.pending)
                self.pending = ""
                break
            marker = THINK_CLOSE if self.inside else THINK_OPEN
            at = self.pending.find(marker)
            if not self.inside and not self.seen_text:
                stripped = self.pending.lstrip()
                if stripped and not THINK_OPEN.startswith(stripped[: len(THINK_OPEN)]):
                    self.done = self.answer_started = True   # the reply opened with text: no reasoning
                    continue
            if at >= 0:
                before, self.pending = self.pending[:at], self.pending[at + len(marker):]
                if self.inside or before.strip():         # white space before the opening tag is dropped
                    (reasoning if self.inside else answer).append(before)
                if self.inside:
                    self.done = True
                self.inside = not self.inside
                self.seen_text = True
                continue
            hold = _held_prefix(self.pending, marker)
            if not self.inside and not self.seen_text:
                hold = len(self.pending)      # only white space so far, or a partial opening tag
            cut = len(self.pending) - hold
            (reasoning if self.inside else answer).append(self.pending[:cut])
            self.pending = self.pending[cut:]
            break
        return "".join(reasoning), "".join(answer)

    def flush(self) -> tuple[str, str]:
        rest, self.pending = self.pending, ""
        return (rest, "") if self.inside else ("", rest)


def prompt_opens_think(tokenizer, prompt_ids: Sequence[int]) -> bool:
    """Whether the prompt ends inside an open think block (the template wrote `<think>` and no `</think>` after
    it): what the model writes next is reasoning. Read from the prompt's last 8 tokens."""
    tail = tokenizer.decode(list(prompt_ids[-8:]), skip_special=False)
    return tail.rfind(THINK_OPEN) > tail.rfind(THINK_CLOSE)


# Parsers beyond think tags, keyed by a marker found in the chat template source. Each factory takes
# (tokenizer, prompt_ids) and returns a parser.
PARSERS: dict[str, Callable[[object, Sequence[int]], ReasoningParser]] = {
    CHANNEL: HarmonyParser.for_request,          # gpt-oss: the analysis channel is the reasoning
}


def reasoning_parser(template_source: str | None, tokenizer, prompt_ids: Sequence[int]) -> ReasoningParser | None:
    """The parser for one request, or None when the model's template shows no reasoning format."""
    if not template_source:
        return None
    for marker, factory in PARSERS.items():
        if marker in template_source:
            return factory(tokenizer, prompt_ids)
    if THINK_CLOSE in template_source:
        return ThinkTagParser(starts_inside=prompt_opens_think(tokenizer, prompt_ids))
    return None


# Options a chat template may read, and the request field each comes from. The app shows a switch for
# an option only when the model's template mentions it (ModelInfo.template_options).
TEMPLATE_OPTIONS = ("enable_thinking", "reasoning_effort")


def template_options(template_source: str | None) -> tuple[str, ...]:
    return tuple(o for o in TEMPLATE_OPTIONS if template_source and o in template_source)
