"""Continuing a reply cut off by the token limit (GenerateRequest.continue_final_message), on the starter
model: greedy 10 tokens, then 10 more from the reply so far, equal greedy 20 tokens in one go."""
from __future__ import annotations

import pytest

from engine.api import ChatMessage, Finished, GenerateRequest, SamplingParams, TextDelta
from engine.engine import Engine

pytestmark = pytest.mark.golden


def _reply(engine, messages, n, **kw) -> tuple[str, Finished]:
    events = list(engine.submit(GenerateRequest(messages=tuple(messages), params=SamplingParams.greedy(max_tokens=n),
                                                **kw)).events(120))
    return "".join(e.text for e in events if isinstance(e, TextDelta)), events[-1]


def test_a_continued_reply_equals_the_uncut_one(smollm2_path):
    engine = Engine(backend="cpu", max_context=512)
    try:
        engine.load(smollm2_path).result(120)
        question = [ChatMessage("user", "Name three colours of the rainbow and say why the sky is blue.")]
        whole, fin = _reply(engine, question, 20)
        assert fin.reason == "length"
        first, fin = _reply(engine, question, 10)
        assert fin.reason == "length" and whole.startswith(first) and len(first) < len(whole)
        rest, fin = _reply(engine, [*question, ChatMessage("assistant", first)], 10, continue_final_message=True)
        assert first + rest == whole
    finally:
        engine.shutdown()


def test_continue_needs_a_reply_to_continue():
    with pytest.raises(ValueError, match="continue_final_message"):
        GenerateRequest(messages=(ChatMessage("user", "hi"),), continue_final_message=True)
