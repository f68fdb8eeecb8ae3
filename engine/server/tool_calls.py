"""Tool calls written by the model as text, back into OpenAI `tool_calls`.

Format (Qwen2.5/Qwen3/Hermes templates): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
one block per call, anywhere in the answer. Text outside the blocks stays the message content. A block
whose JSON does not parse, or lacks a name, is left in the content as text (the client sees what the
model wrote rather than nothing).
"""
from __future__ import annotations

import json
import re
import uuid

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


def template_has_tool_calls(template_source: str | None) -> bool:
    return bool(template_source) and TOOL_CALL_OPEN in template_source


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """(content without the parsed blocks, OpenAI tool_calls with `arguments` as JSON text)."""
    calls: list[dict] = []

    def take(match: re.Match) -> str:
        try:
            value = json.loads(match.group(1))
        except ValueError:
            return match.group(0)
        if not isinstance(value, dict) or not isinstance(value.get("name"), str):
            return match.group(0)
        args = value.get("arguments", value.get("parameters", {}))
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": value["name"],
                                   "arguments": args if isinstance(args, str) else json.dumps(args)}})
        return ""

    content = _BLOCK.sub(take, text)
    return (content.strip() if calls else content), calls
