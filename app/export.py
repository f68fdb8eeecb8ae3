"""A conversation as a file the user keeps: Markdown to read or paste, JSON with every stored field."""
from __future__ import annotations

import json
import time
from pathlib import Path

from app.store import Conversation, Message
from engine import file_names

FORMATS = {".md": "Markdown (*.md)", ".json": "JSON (*.json)"}

FALLBACK_STEM = "chat"
# Room for a whole automatic title (markdown_prep.plain_title); 60 characters of at most 4 UTF-8 bytes and a
# suffix stay under the 255 bytes a file name may have on common file systems.
STEM_MAX_CHARS = 60


def file_stem(title: str) -> str:
    """A file name without its suffix for a chat titled `title`, valid on every system: illegal characters
    become spaces, each run of whitespace one space, at most STEM_MAX_CHARS characters, no leading or
    trailing dots and spaces (Windows drops trailing ones; a leading dot hides the file elsewhere).
    FALLBACK_STEM where nothing is left or the name is a reserved device name."""
    stem = " ".join(file_names.FORBIDDEN_CHARS.sub(" ", title).split())
    stem = stem[:STEM_MAX_CHARS].strip(" .")
    if not stem or file_names.names_a_device(stem):
        return FALLBACK_STEM
    return stem


def to_markdown(conv: Conversation, messages: list[Message]) -> str:
    out = [f"# {conv.title}", ""]
    if conv.system_prompt:
        out += ["> System prompt: " + conv.system_prompt.replace("\n", "\n> "), ""]
    for m in messages:
        who = "You" if m.role == "user" else f"Assistant{f' ({m.model})' if m.model else ''}"
        out += [f"## {who}", ""]
        if m.reasoning:
            out += ["<details><summary>Thinking</summary>", "", m.reasoning, "", "</details>", ""]
        out += [m.content, ""]
        if m.state not in ("complete", "streaming"):
            out += [f"_({m.state}{': ' + m.error if m.error else ''})_", ""]
    return "\n".join(out)


def to_json(conv: Conversation, messages: list[Message]) -> str:
    return json.dumps({
        "format": "halo-chat-conversation", "version": 1, "exported_at": time.time(),
        "title": conv.title, "created_at": conv.created_at, "system_prompt": conv.system_prompt,
        "sampling": conv.sampling, "template_options": conv.template_options,
        "messages": [{"role": m.role, "content": m.content, "reasoning": m.reasoning, "state": m.state,
                      "created_at": m.created_at, "model": m.model, "error": m.error, "usage": m.usage}
                     for m in messages],
    }, ensure_ascii=False, indent=2)


def export(conv: Conversation, messages: list[Message], path: Path) -> None:
    """Writes by the file's suffix (.md or .json); the file appears whole or not at all."""
    path = Path(path)
    if path.suffix.lower() not in FORMATS:
        raise ValueError(f"export to {', '.join(FORMATS)}, not {path.suffix or 'a file without a suffix'}")
    text = to_markdown(conv, messages) if path.suffix.lower() == ".md" else to_json(conv, messages)
    tmp = path.with_name(path.name + ".part")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError:
        tmp.unlink(missing_ok=True)      # a full disk or a target in use: no half-written file left beside it
        raise
