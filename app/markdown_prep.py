"""Markdown as people type it, prepared for Qt's Markdown importer (CommonMark), which the chat view uses.

- Single line breaks are kept: CommonMark joins them into one paragraph, which loses the lines of a poem or
  of a Shift+Enter message. Outside code, a line followed by another non-blank line gets a hard break.
- Every fenced code block is followed by a "Copy code" link (`COPY_SCHEME:N`), N its index in `blocks`,
  so each block can be copied alone; `blocks` holds (language, code) as written.
Written by hand because it has to match Qt's importer, not render HTML: no Markdown library does that.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

COPY_SCHEME = "halo-copy"
_FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*([\w+#.-]*)")


@dataclass(frozen=True)
class Prepared:
    markdown: str
    blocks: tuple[tuple[str, str], ...]       # (language, code) of each fenced block, in order


def prepare(text: str) -> Prepared:
    # CRLF lines as LF ones: a hard break added after a CR ("| a |\r  ") kept a table from being one
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[str] = []
    blocks: list[tuple[str, str]] = []
    fence, indent = "", 0                      # the open fence's marker ("" outside code) and its indentation
    language, code = "", []
    for i, line in enumerate(lines):
        m = _FENCE.match(line)
        if not fence and m:
            fence, indent, language, code = m.group(2), len(m.group(1)), m.group(3), []
            out.append(line)
            continue
        if fence:
            out.append(line)
            if _closes(line, fence):
                blocks.append((language, "\n".join(code)))
                out.append("")
                out.append(f"[Copy code]({COPY_SCHEME}:{len(blocks) - 1})")
                out.append("")
                fence = ""
            else:
                code.append(_code_line(line, indent))
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and nxt.strip() and not _FENCE.match(nxt) and not line.endswith("  "):
            line += "  "                       # CommonMark's hard line break
        out.append(line)
    if fence:                                  # still streaming inside a block: copyable as far as it got
        blocks.append((language, "\n".join(code)))
    return Prepared("\n".join(out), tuple(blocks))


def _closes(line: str, fence: str) -> bool:
    """CommonMark's closing fence: at most 3 spaces, at least as many of the opening character, then only blanks
    (indented 4 or more, it is a line of the code, as the importer shows it)."""
    stripped = line.rstrip(" \t\r")
    body = stripped.lstrip(" ")
    return len(stripped) - len(body) <= 3 and len(body) >= len(fence) and not body.strip(fence[0])


def _code_line(line: str, indent: int) -> str:
    """A code line as shown: without the opening fence's indentation (up to that many spaces) and a CR."""
    line = line.removesuffix("\r")
    return line[min(indent, len(line) - len(line.lstrip(" "))):]


_MARKUP = re.compile(r"^\s{0,3}(#{1,6}\s+|>\s*|[-*+]\s+|\d+[.)]\s+)")


def plain_title(text: str, limit: int = 48) -> str:
    """A chat title from a message: its first line with content, Markdown markup taken off."""
    for line in text.splitlines():
        if _FENCE.match(line):
            continue
        line = _MARKUP.sub("", line)
        line = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", line)          # [text](url) -> text
        line = re.sub(r"(\*\*|__|\*|_|`|~~)(.+?)\1", r"\2", line)         # emphasis, code, strike
        line = " ".join(line.split())
        if line:
            return line[:limit] + ("…" if len(line) > limit else "")
    return "New chat"
