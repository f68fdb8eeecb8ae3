"""gpt-oss's harmony format: a reply's `analysis` channel as reasoning, the rest as the answer.

A harmony reply is a sequence of messages, each a header and a body framed by special tokens:

    <|channel|>analysis<|message|>...thinking...<|end|><|start|>assistant<|channel|>final<|message|>...<|return|>

(the generation prompt already wrote `<|start|>assistant`). `<|end|>` closes one message and does not stop
generation; `<|return|>` (and `<|call|>` for a tool call) does. The markers are special tokens, which the
detokenizer turns into no text, so the parser follows token ids; header words (`assistant`, the channel name,
`to=functions.x`, `json`) arrive as ordinary text and are dropped. Bodies of the `analysis` channel are
reasoning; `final` and `commentary` (tool-call preambles) are the answer.
"""
from __future__ import annotations

from collections.abc import Sequence

CHANNEL, MESSAGE, START, END, RETURN, CALL = ("<|channel|>", "<|message|>", "<|start|>", "<|end|>", "<|return|>",
                                              "<|call|>")
REASONING_CHANNELS = frozenset({"analysis"})


class HarmonyParser:
    """Contract as engine.reasoning.ReasoningParser. `ids`: the vocabulary's ids of the markers above."""

    def __init__(self, ids: dict[str, int], in_body_of: str | None = None):
        self.ids = ids
        self.by_id = {i: marker for marker, i in ids.items()}
        self.in_body = in_body_of is not None         # inside a message body (its channel known) ...
        self.channel = in_body_of or ""
        self.header: list[str] = []                   # ... or collecting a header's text up to <|message|>

    @classmethod
    def for_request(cls, tokenizer, prompt_ids: Sequence[int]) -> HarmonyParser:
        ids = {m: tokenizer.token_to_id[m] for m in (CHANNEL, MESSAGE, START, END, RETURN, CALL)
               if m in tokenizer.token_to_id}
        return cls(ids, _open_body_channel(tokenizer, ids, prompt_ids))

    def feed(self, token_id: int, text: str) -> tuple[str, str]:
        marker = self.by_id.get(token_id)
        if marker == MESSAGE:
            self.channel = _channel_of("".join(self.header))
            self.in_body, self.header = True, []
        elif marker in (START, END, RETURN, CALL):
            self.in_body, self.header = False, []
        elif marker == CHANNEL:
            self.header.append(CHANNEL)
        elif self.in_body:
            return (text, "") if self.channel in REASONING_CHANNELS else ("", text)
        else:
            self.header.append(text)
        return "", ""

    def flush(self) -> tuple[str, str]:
        return "", ""


def _channel_of(header: str) -> str:
    """`assistant<|channel|>analysis` -> "analysis"; `...<|channel|>commentary json` -> "commentary"."""
    if CHANNEL not in header:
        return ""
    words = header.rsplit(CHANNEL, 1)[1].split()
    return words[0] if words else ""


def _open_body_channel(tokenizer, ids: dict[str, int], prompt_ids: Sequence[int]) -> str | None:
    """When the prompt ends inside a message body (a template that pre-fills `<|channel|>final<|message|>`),
    that message's channel; else None (the reply starts with a header)."""
    frame = {ids.get(m) for m in (MESSAGE, START, END, RETURN, CALL)} - {None}
    last = next((k for k in range(len(prompt_ids) - 1, -1, -1) if prompt_ids[k] in frame), None)
    if last is None or prompt_ids[last] != ids.get(MESSAGE):
        return None
    start = max((k for k in range(last) if prompt_ids[k] in frame), default=-1) + 1
    header = "".join(CHANNEL if i == ids.get(CHANNEL) else tokenizer.decode([i]) for i in prompt_ids[start:last])
    return _channel_of(header)
