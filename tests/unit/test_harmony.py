"""gpt-oss's harmony channels through a real Tokenizer and Generation: analysis is reasoning, final is the
answer, headers are dropped, <|end|> does not stop and <|return|> does."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.api import GenerateRequest, SamplingParams, TextDelta
from engine.generation import Generation
from engine.gguf import open_gguf
from engine.reasoning import reasoning_parser
from engine.tokenizer import build_tokenizer

DATA = Path(__file__).resolve().parents[1] / "golden" / "data"
HARMONY = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>"]
TEMPLATE = "{{ '<|start|>assistant' }}{# <|channel|> analysis / final #}"     # what the reasoning factory keys on


@pytest.fixture(scope="module")
def tokenizer():
    """The tiny gpt-oss file's byte-level BPE with harmony's control tokens appended."""
    with open_gguf(DATA / "tiny-gptoss-mxfp4.gguf") as g:
        meta = dict(g.metadata)
    meta["tokenizer.ggml.tokens"] = list(meta["tokenizer.ggml.tokens"]) + HARMONY
    meta["tokenizer.ggml.token_type"] = np.concatenate([meta["tokenizer.ggml.token_type"], [3] * len(HARMONY)])
    return build_tokenizer(meta)


def _run(tokenizer, prompt: str, reply: str):
    prompt_ids = tokenizer.encode(prompt, parse_special=True)
    reply_ids = tokenizer.encode(reply, parse_special=True)
    events = []
    gen = Generation(GenerateRequest(prompt="x", params=SamplingParams.greedy(200)), prompt_ids, tokenizer,
                     tokenizer.stop_ids, events.append, reasoning_parser(TEMPLATE, tokenizer, prompt_ids))
    for token in reply_ids:
        gen.on_token(token, None)
        if gen.finished:
            break
    deltas = [e for e in events if isinstance(e, TextDelta)]
    return "".join(d.reasoning for d in deltas), "".join(d.text for d in deltas), gen


def test_analysis_is_reasoning_and_final_is_the_answer(tokenizer):
    reasoning, answer, gen = _run(
        tokenizer, "<|start|>user<|message|>Hello<|end|><|start|>assistant",
        "<|channel|>analysis<|message|>The user greets. Answer briefly.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello world! How are you?<|return|>"
        "<|start|>assistant<|channel|>final<|message|>never seen")
    assert reasoning == "The user greets. Answer briefly."
    assert answer == "Hello world! How are you?"
    assert gen.finished and gen.output_ids[-1] == tokenizer.token_to_id["<|return|>"]   # <|end|> went on


def test_a_tool_call_preamble_is_answer_and_the_call_stops(tokenizer):
    reasoning, answer, gen = _run(
        tokenizer, "<|start|>assistant",
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary"
        "<|message|>Let me look.<|end|><|start|>assistant to=functions.get<|channel|>commentary json"
        "<|message|>{\"city\": \"Paris\"}<|call|>")
    assert reasoning == "Need the weather."
    assert answer == "Let me look.{\"city\": \"Paris\"}"
    assert gen.output_ids[-1] == tokenizer.token_to_id["<|call|>"]


def test_a_prompt_that_prefills_the_final_channel_starts_in_the_answer(tokenizer):
    reasoning, answer, _ = _run(tokenizer, "<|start|>assistant<|channel|>final<|message|>", "Hello world!<|return|>")
    assert (reasoning, answer) == ("", "Hello world!")
    reasoning, answer, _ = _run(tokenizer, "<|start|>assistant<|channel|>analysis<|message|>", "Hmm.<|end|>"
                                "<|start|>assistant<|channel|>final<|message|>Yes.<|return|>")
    assert (reasoning, answer) == ("Hmm.", "Yes.")
