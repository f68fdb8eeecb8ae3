"""The reasoning splitter: thinking and answer apart while text streams in arbitrary pieces."""
import pytest

from engine.api import GenerateRequest, SamplingParams, TextDelta
from engine.generation import Generation
from engine.reasoning import ThinkTagParser, reasoning_parser, template_options


def _split(parser, pieces):
    reasoning, answer = "", ""
    for piece in pieces:
        r, a = parser.feed(0, piece)
        reasoning, answer = reasoning + r, answer + a
    r, a = parser.flush()
    return reasoning + r, answer + a


TEXT = "<think>\nThe user greets; answer briefly.\n</think>\n\nHello! How can I help?"


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 100])
def test_think_block_splits_for_any_piece_size(size):
    pieces = [TEXT[i:i + size] for i in range(0, len(TEXT), size)]
    reasoning, answer = _split(ThinkTagParser(), pieces)
    assert reasoning == "\nThe user greets; answer briefly.\n"
    assert answer == "Hello! How can I help?"


def test_reply_starting_inside_the_block_when_the_prompt_opened_it():
    text = "I should be brief.</think>\n\nHi."
    reasoning, answer = _split(ThinkTagParser(starts_inside=True), list(text))
    assert (reasoning, answer) == ("I should be brief.", "Hi.")


def test_no_block_means_everything_is_answer_and_later_tags_stay_text():
    text = "Plain answer that mentions <think> and </think> literally."
    assert _split(ThinkTagParser(), list(text)) == ("", text)


def test_unclosed_block_is_all_reasoning():
    assert _split(ThinkTagParser(), ["<think>", "still thinking", " <"]) == ("still thinking <", "")


def test_factory_reads_the_template_and_the_prompt_tail():
    class Tok:
        def decode(self, ids, skip_special=True):
            return {1: "<|im_start|>assistant\n<think>\n", 2: "<|im_start|>assistant\n"}[ids[-1]]

    assert reasoning_parser(None, Tok(), [1]) is None
    assert reasoning_parser("{{ messages }}", Tok(), [1]) is None
    inside = reasoning_parser("{% if x %}</think>{% endif %}", Tok(), [1])
    outside = reasoning_parser("{% if x %}</think>{% endif %}", Tok(), [2])
    assert inside.inside and not outside.inside
    assert template_options("{% if enable_thinking %}<think>{% endif %}") == ("enable_thinking",)
    assert template_options("{{ reasoning_effort }}") == ("reasoning_effort",)


def test_generation_emits_reasoning_apart_from_text():
    class Tok:
        def stream_decoder(self):
            pieces = {1: "<th", 2: "ink>Let me", 3: " see</think>", 4: "Yes."}

            class D:
                def push(self, i):
                    return pieces[i]

                def flush(self):
                    return ""
            return D()

    events = []
    request = GenerateRequest(prompt="x", params=SamplingParams.greedy(8))
    gen = Generation(request, [5], Tok(), frozenset({9}), events.append, ThinkTagParser())
    for token in (1, 2, 3, 4):
        gen.on_token(token, None)
    gen.on_token(9, None)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert "".join(d.reasoning for d in deltas) == "Let me see"
    assert "".join(d.text for d in deltas) == "Yes."
    assert events[-1].output_token_ids == (1, 2, 3, 4, 9)
