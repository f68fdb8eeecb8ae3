"""Tool calls written as text -> OpenAI tool_calls: the JSON format (Qwen2.5/Qwen3/Hermes) and Qwen3.5's
XML-style format, the latter checked against the real Qwen3.5 chat template's own rendering of a call."""
from __future__ import annotations

import json
from pathlib import Path

from jinja2.sandbox import ImmutableSandboxedEnvironment

from engine.server.tool_calls import parse_tool_calls, template_has_tool_calls

TEMPLATE = Path(__file__).resolve().parents[1] / "golden" / "data" / "qwen35-chat-template.jinja"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "hourly": {"type": "boolean"},
    "units": {"type": "object"}, "zip": {"type": "string"}}}}}]


def _args(call: dict) -> dict:
    return json.loads(call["function"]["arguments"])


def test_json_format():
    text = 'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    content, [call] = parse_tool_calls(text)
    assert content == "Checking." and call["function"]["name"] == "get_weather" and _args(call) == {"city": "Paris"}
    assert call["type"] == "function" and call["id"].startswith("call_")


def test_xml_format_as_the_qwen35_template_writes_it_round_trips():
    arguments = {"city": "Paris", "days": 3, "hourly": False, "units": {"temp": "C"}, "zip": "75001"}
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "",
                 "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": arguments}},
                                {"type": "function", "function": {"name": "get_time", "arguments": {}}}]}]
    env = ImmutableSandboxedEnvironment()
    env.globals["raise_exception"] = lambda m: (_ for _ in ()).throw(ValueError(m))
    rendered = env.from_string(TEMPLATE.read_text(encoding="utf-8")).render(messages=messages, tools=TOOLS)
    reply = rendered.rsplit("<|im_start|>assistant\n", 1)[1].split("<|im_end|>")[0]
    reply = reply.split("</think>\n\n", 1)[-1]          # the template's (empty) thinking of the last turn
    assert "<function=get_weather>" in reply and "<parameter=days>\n3\n</parameter>" in reply
    content, calls = parse_tool_calls(reply, TOOLS)
    assert content == ""
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert _args(calls[0]) == arguments            # "zip" stays text: its schema says string
    assert _args(calls[1]) == {}


def test_without_a_schema_values_stay_text_and_bad_blocks_stay_in_the_content():
    _, [call] = parse_tool_calls("<tool_call>\n<function=f>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>")
    assert _args(call) == {"n": "3"}
    broken = "<tool_call>\n<function=f>\nstray text\n</function>\n</tool_call> and <tool_call>{not json}</tool_call>"
    assert parse_tool_calls(broken) == (broken, [])


def test_templates_with_tool_calls():
    assert template_has_tool_calls(TEMPLATE.read_text(encoding="utf-8"))
    assert not template_has_tool_calls("{{ messages }}") and not template_has_tool_calls(None)
