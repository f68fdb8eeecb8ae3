"""Tool calls written by the model as text, back into OpenAI `tool_calls`.

Two formats inside `<tool_call>` ... `</tool_call>` blocks, one block per call, anywhere in the answer:
- JSON (Qwen2.5, Qwen3, Hermes templates): `{"name": ..., "arguments": {...}}`;
- XML-style (Qwen3.5 and Qwen3-Coder templates): `<function=NAME>` then `<parameter=P>\\nVALUE\\n</parameter>`
  blocks, then `</function>`. A value is text; where the request's tool schema gives the parameter a
  non-string JSON type (integer, number, boolean, object, array) it is read as JSON, falling back to the
  text when it is not valid JSON.
Text outside the blocks stays the message content. A block that parses as neither, or lacks a name, is left
in the content as text (the client sees what the model wrote rather than nothing).
"""
from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\n]+)>(.*?)</function>", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)
_TOOLS_VARIABLE = re.compile(r"\btools\b")


def template_has_tool_calls(template_source: str | None) -> bool:
    return bool(template_source) and TOOL_CALL_OPEN in template_source


def template_takes_tools(template_source: str | None) -> bool:
    """Whether the chat template reads the `tools` variable at all: a template that does not would never show the
    model the tools a request sends."""
    return bool(template_source) and _TOOLS_VARIABLE.search(template_source) is not None


def _json_call(body: str) -> tuple[str, object] | None:
    try:
        value = json.loads(body)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    return value["name"], value.get("arguments", value.get("parameters", {}))


def _schema_type(tools, function: str, parameter: str) -> str | None:
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if isinstance(fn, Mapping) and fn.get("name") == function:
            props = (fn.get("parameters") or {}).get("properties") or {}
            kind = (props.get(parameter) or {}).get("type") if isinstance(props, Mapping) else None
            return kind if isinstance(kind, str) else None
    return None


def _typed(text: str, kind: str | None) -> object:
    if kind in (None, "string"):
        return text
    if kind == "boolean" and text.strip() in ("True", "False"):     # a template's `| string` of a bool
        return text.strip() == "True"
    try:
        return json.loads(text)
    except ValueError:
        return text


def _xml_call(body: str, tools) -> tuple[str, dict] | None:
    match = _FUNCTION.fullmatch(body.strip())
    if match is None or _PARAMETER.sub("", match.group(2)).strip():
        return None
    name, args = match.group(1).strip(), {}
    for p in _PARAMETER.finditer(match.group(2)):
        value = p.group(2)
        value = value[1:] if value.startswith("\n") else value
        value = value[:-1] if value.endswith("\n") else value
        key = p.group(1).strip()
        args[key] = _typed(value, _schema_type(tools, name, key))
    return name, args


def parse_tool_calls(text: str, tools=None) -> tuple[str, list[dict]]:
    """(content without the parsed blocks, OpenAI tool_calls with `arguments` as JSON text). `tools`: the
    request's tool definitions (for the parameter types of XML-style calls)."""
    calls: list[dict] = []

    def take(match: re.Match) -> str:
        call = _json_call(match.group(1)) or _xml_call(match.group(1), tools)
        if call is None:
            return match.group(0)
        name, args = call
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}})
        return ""

    content = _BLOCK.sub(take, text)
    return (content.strip() if calls else content), calls
