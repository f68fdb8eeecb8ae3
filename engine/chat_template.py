"""Chat templates are attacker-controlled code from the model file: render them in a bounded sandbox.

- `ImmutableSandboxedEnvironment` (jinja2 >= 3.1.6): no dunder access, no mutation of lists/dicts.
  Access to an unsafe attribute fails at once (jinja would otherwise print "" for it).
- Extras: only `raise_exception` and `strftime_now` (plus a `tojson` that does not HTML-escape, as in
  transformers). `lipsum` is removed.
- Time and memory: compile and render run in a separate worker process (engine.template_worker), killed
  when the time limit passes and capped in address space, so no C-level call can freeze this process.
  Inside it, a trace function also aborts at the deadline (ordinary loops end without a kill).
- Compile: jinja's constant folding is off (optimized=False), and compiling happens in the worker too.
- Size: every value built by `+`, `*`, `%`, `**`, `~`, a filter or a method call is checked against
  `max_chars`; operations that multiply sizes (`'a' * n`, `replace`, `join`, `center`, `indent`,
  format widths...) are checked before they run, so one step cannot allocate gigabytes. The output is
  capped too.
The sandbox rules are the first wall; the worker process is the bound that holds when they miss a case.
The sandbox itself is engine.template_sandbox, imported by the worker alone: this side never loads jinja2.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.errors import TemplateError

RENDER_TIME_LIMIT_S = 2.0
MAX_CHARS = 4_000_000          # any single value and the whole output; ~1M tokens of text


class ChatTemplate:
    """A chat template, checked at construction. `render()` may be called from any thread; compile and
    render run in the warm template worker process (engine.template_worker), so each call returns or
    raises TemplateError within about `time_limit_s` + a quarter second, whatever the template does."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "",
                 time_limit_s: float = RENDER_TIME_LIMIT_S, max_chars: int = MAX_CHARS):
        if not isinstance(source, str) or not source.strip():
            raise TemplateError("the chat template is empty")
        if len(source) > max_chars:
            raise TemplateError(f"the chat template is {len(source):,} characters long (limit {max_chars:,})")
        self.source = source
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.time_limit_s = time_limit_s
        self.max_chars = max_chars
        self._call({"op": "compile"})

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               **extra: Any) -> str:
        context = {"bos_token": self.bos_token, "eos_token": self.eos_token, **extra,
                   "messages": [dict(m) for m in messages], "add_generation_prompt": add_generation_prompt}
        return self._call({"op": "render", "context": context})["text"]

    def _call(self, message: dict[str, Any]) -> dict[str, Any]:
        from engine.template_worker import shared_worker

        message.update(source=self.source, max_chars=self.max_chars, time_limit=self.time_limit_s)
        try:
            answer = shared_worker().request(message, self.time_limit_s)
        except (TypeError, ValueError) as e:     # a context value JSON cannot carry
            raise TemplateError(f"the conversation cannot be passed to the chat template: {e}") from None
        if not answer.get("ok"):
            raise TemplateError(str(answer.get("message", "the chat template failed")))
        return answer


def chat_template_from_metadata(metadata: Mapping[str, Any], tokenizer=None, **options: Any) -> ChatTemplate | None:
    """The model's default template (`tokenizer.chat_template`), or None: the model is completion-only."""
    from engine.gguf.meta import Meta  # a non-string template is a malformed file, never literal text

    source = Meta.of(metadata).get_str("tokenizer.chat_template")
    if not source:
        return None
    bos = eos = ""
    if tokenizer is not None:
        bos = tokenizer.token_text(tokenizer.bos_id) if tokenizer.bos_id is not None else ""
        eos = tokenizer.token_text(tokenizer.eos_id) if tokenizer.eos_id is not None else ""
    return ChatTemplate(source, bos_token=bos, eos_token=eos, **options)
