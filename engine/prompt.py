"""Prompt ids from a conversation (through the chat template) or from raw text, safely.

Injection rule: control tokens (e.g. `<|im_start|>`) come only from the template's own text, never from
message content. How: before rendering, every control-token text inside a message's content - and any
partial one at its start or end that could join with template text - is replaced by a private marker
(`\\ue000<nonce><n>\\ue001`). The rendered string is split around special tokens with special parsing on
(markers cannot match one), then each marker is put back as plain text inside its raw fragment. Content
without control text tokenizes exactly as llama.cpp tokenizes the whole rendered string, so ids match
the references; content with control text gets the ids of that text as plain characters.
"""
from __future__ import annotations

import functools
import logging
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.chat_template import ChatTemplate, chat_template_from_metadata
from engine.errors import InvalidRequestError, TemplateError
from engine.tokenizer import Tokenizer, build_tokenizer

log = logging.getLogger(__name__)

_MARK_OPEN, _MARK_CLOSE = "\ue000", "\ue001"

# A message's role is one of these or a role the template itself compares against (e.g. "ipython",
# "developer"); never free text, which could carry control tokens into the rendered prompt.
STANDARD_ROLES = frozenset({"system", "user", "assistant", "tool"})
_ROLE_LITERAL = re.compile(r"""role['"]?\]?\s*(?:==|!=)\s*['"]([A-Za-z_][A-Za-z0-9_]{0,31})['"]""")


@functools.lru_cache(maxsize=16)
def template_roles(source: str) -> frozenset[str]:
    """The roles a template knows: the standard ones plus every identifier it compares a role with."""
    return STANDARD_ROLES | frozenset(_ROLE_LITERAL.findall(source))


def check_roles(messages: list[dict[str, Any]], template: ChatTemplate | PlainChatFormat) -> None:
    allowed = template_roles(template.source) if template.source else STANDARD_ROLES
    for m in messages:
        if m["role"] not in allowed:
            raise InvalidRequestError(f"message role {m['role'][:40]!r} is not one this model's chat template "
                                      f"knows ({', '.join(sorted(allowed))})")


def encode_raw(tokenizer: Tokenizer, text: str) -> list[int]:
    """Raw completion prompt: BOS as the metadata says, control-token text stays plain text."""
    return tokenizer.encode(text, parse_special=False)


def normalize_messages(messages: Iterable[Any]) -> list[dict[str, Any]]:
    """Dicts with role and content from mappings or objects with .role/.content (engine.api.ChatMessage)."""
    out = []
    for m in messages:
        if isinstance(m, Mapping):
            d = dict(m)
        else:
            d = {"role": m.role, "content": m.content}
        if d.get("content") is None:
            d["content"] = ""
        if not isinstance(d.get("role"), str) or not isinstance(d["content"], str):
            raise TemplateError("each message needs a string role and string content")
        out.append(d)
    return out


class _Markers:
    def __init__(self):
        self.nonce = secrets.token_hex(4)
        self.originals: list[str] = []
        self.pattern = re.compile(f"{_MARK_OPEN}{self.nonce}(\\d+){_MARK_CLOSE}")

    def wrap(self, text: str) -> str:
        self.originals.append(text)
        return f"{_MARK_OPEN}{self.nonce}{len(self.originals) - 1}{_MARK_CLOSE}"

    def restore(self, fragment: str) -> str:
        return self.pattern.sub(lambda m: self.originals[int(m.group(1))], fragment)


def _defuse(content: str, tokenizer: Tokenizer, markers: _Markers) -> str:
    """`content` with every control-token text (whole or cut at either end) replaced by a marker."""
    pieces = []
    for fragment in tokenizer.partition(content, parse_special=True):
        if isinstance(fragment, int):
            text = tokenizer.token_text(fragment)
            pieces.append(markers.wrap(text) if tokenizer.is_control(fragment) else text)
        else:
            pieces.append(fragment)
    if not pieces:
        return content
    prefixes, suffixes = tokenizer.control_affixes()
    head, tail = pieces[0], pieces[-1]
    if not head.startswith(_MARK_OPEN):
        for k in range(min(len(head), 64), 0, -1):
            if head[:k] in suffixes:
                pieces[0] = markers.wrap(head[:k]) + head[k:]
                break
    tail = pieces[-1]
    if not tail.endswith(_MARK_CLOSE):
        for k in range(min(len(tail), 64), 0, -1):
            if tail[-k:] in prefixes:
                pieces[-1] = tail[:-k] + markers.wrap(tail[-k:])
                break
    return "".join(pieces)


MAX_JSON_DEPTH = 32    # tool schemas and tool calls nest; deeper than this is refused, not recursed into


def refuse_control_text(value: Any, tokenizer: Tokenizer, where: str, depth: int = 0) -> None:
    """Structured values the template renders as they are (tool schemas, tool calls) may not carry control-
    token text at all: unlike message content they are not defused, so such text is refused outright."""
    if depth > MAX_JSON_DEPTH:
        raise InvalidRequestError(f"{where} is nested more than {MAX_JSON_DEPTH} levels deep")
    if isinstance(value, str):
        if any(isinstance(f, int) and tokenizer.is_control(f) for f in tokenizer.partition(value, parse_special=True)):
            raise InvalidRequestError(f"{where} contains the model's control-token text, which is refused")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            refuse_control_text(key, tokenizer, where, depth + 1)
            refuse_control_text(item, tokenizer, where, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            refuse_control_text(item, tokenizer, where, depth + 1)


def encode_chat(tokenizer: Tokenizer, template: ChatTemplate | PlainChatFormat | None, messages: Iterable[Any],
                add_generation_prompt: bool = True, **template_options: Any) -> list[int]:
    """Prompt ids for a conversation; BOS is added as the metadata says unless the template wrote it."""
    if template is None:
        raise TemplateError("this model has no chat template: use a raw completion prompt instead")
    markers = _Markers()
    plain = normalize_messages(messages)
    check_roles(plain, template)
    for m in plain:       # fields beyond role/content (tool_calls, name, tool_call_id) are rendered as they are
        refuse_control_text({k: v for k, v in m.items() if k not in ("role", "content")}, tokenizer, "a message")
    if "tools" in template_options:
        refuse_control_text(template_options["tools"], tokenizer, "tools")
    safe = [{**m, "content": _defuse(m["content"], tokenizer, markers)} for m in plain]
    rendered = template.render(safe, add_generation_prompt=add_generation_prompt, **template_options)
    fragments = tokenizer.partition(rendered, parse_special=True)
    if markers.originals:
        fragments = [markers.restore(f) if isinstance(f, str) else f for f in fragments]
        if any(isinstance(f, str) and _MARK_OPEN + markers.nonce in f for f in fragments):
            log.warning("the chat template cut a protected part of a message; it is kept as plain text")
    ids = tokenizer.encode_fragments(fragments, add_bos=False)
    if tokenizer.add_bos and not (ids and ids[0] == tokenizer.bos_id):
        ids.insert(0, tokenizer.bos_id)
    return ids


class PlainChatFormat:
    """The fallback when the model's own template is refused (too slow, too big, does not compile): a
    plain "Role: text" transcript, built in Python (no template code runs). The model stays usable,
    though it answers less well than with its own format; ModelInfo.template_notice says so."""

    source = None

    def render(self, messages, add_generation_prompt: bool = True, **_options: Any) -> str:
        turns = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
        if add_generation_prompt:
            turns.append("Assistant:")
        return "\n\n".join(turns)


@dataclass(frozen=True)
class PromptFormat:
    """What a loaded model needs to turn requests into prompt ids. `has_chat_template` false means the
    model is completion-only: send raw prompts (`encode_raw`), not messages."""

    tokenizer: Tokenizer
    template: ChatTemplate | PlainChatFormat | None
    template_notice: str = ""      # set when the model's template was refused and the plain format is used

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> PromptFormat:
        tokenizer = build_tokenizer(metadata)
        try:
            return cls(tokenizer, chat_template_from_metadata(metadata, tokenizer))
        except TemplateError as e:
            log.warning("chat template refused, using the plain format: %s", e)
            return cls(tokenizer, PlainChatFormat(),
                       f"This model's chat template was refused ({e}); a plain chat format is used instead, "
                       "so its replies may be worse than usual.")

    @property
    def has_chat_template(self) -> bool:
        return self.template is not None

    def encode_chat(self, messages: Iterable[Any], add_generation_prompt: bool = True,
                    **template_options: Any) -> list[int]:
        """`template_options`: engine.reasoning.TEMPLATE_OPTIONS values (enable_thinking, ...)."""
        return encode_chat(self.tokenizer, self.template, messages, add_generation_prompt, **template_options)

    @property
    def template_source(self) -> str | None:
        return self.template.source if self.template is not None else None

    def encode_raw(self, text: str) -> list[int]:
        return encode_raw(self.tokenizer, text)
