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
"""
from __future__ import annotations

import datetime
import functools
import json
import re
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from engine.errors import TemplateError

RENDER_TIME_LIMIT_S = 2.0
MAX_CHARS = 4_000_000          # any single value and the whole output; ~1M tokens of text
MAX_INT_ARG = 100_000          # largest int a filter or method may take (widths, counts, ...)
_SIZED = (str, bytes, list, tuple, dict, set, frozenset)


class _Refused(Exception):
    """Raised inside the render; becomes TemplateError with this message."""


class _Raised(Exception):
    """The template called raise_exception()."""


def _size(value: Any) -> int:
    return len(value) if isinstance(value, _SIZED) else 0


def _checked(value: Any, max_chars: int) -> Any:
    if _size(value) > max_chars:
        raise _Refused(f"the template built a value of {_size(value):,} items (limit {max_chars:,})")
    return value


def _format_bound(fmt: str, args: Sequence[Any]) -> int:
    """Upper bound on the length of `fmt` formatted with `args` (% or {} style): widths are digit runs."""
    if "*" in fmt and "%" in fmt:
        raise _Refused("'*' widths in format strings are not allowed in chat templates")
    widths = sum(int(run) for run in re.findall(r"\d+", fmt) if len(run) < 12) + (
        10**12 if re.search(r"\d{12,}", fmt) else 0)
    fields = fmt.count("%") + fmt.count("{")
    largest_arg = max((len(str(a)) if not isinstance(a, _SIZED) else _size(a) * 8 for a in args), default=0)
    return len(fmt) + widths + fields * largest_arg


def _check_int_args(values: Sequence[Any]) -> None:
    for value in values:
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT_ARG:
            raise _Refused(f"integer argument {value} is too large (limit {MAX_INT_ARG:,})")


def _precheck_call(obj: Any, args: tuple, kwargs: dict, max_chars: int) -> None:
    """Refuse calls whose result would exceed max_chars before they allocate it."""
    _check_int_args((*args, *kwargs.values()))
    # jinja wraps str.format/format_map in a plain function; the bound method is its __wrapped__
    owner = getattr(obj, "__self__", None)
    if owner is None:
        owner = getattr(getattr(obj, "__wrapped__", None), "__self__", None)
    name = getattr(obj, "__name__", "")
    if isinstance(owner, str):
        bound = _str_method_bound(owner, name, args, kwargs)
        if bound > max_chars:
            raise _Refused(f"str.{name} would build {bound:,} characters (limit {max_chars:,})")


def _str_method_bound(s: str, name: str, args: tuple, kwargs: dict) -> int:
    if name in ("center", "ljust", "rjust", "zfill"):
        return max(len(s), int(args[0]) if args and isinstance(args[0], int) else 0)
    if name == "expandtabs":
        tab = args[0] if args else kwargs.get("tabsize", 8)
        return len(s) + s.count("\t") * max(int(tab), 0)
    if name == "replace" and len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        hits = s.count(old) if old else len(s) + 1
        if len(args) >= 3 and isinstance(args[2], int) and args[2] >= 0:
            hits = min(hits, args[2])
        return len(s) + hits * max(len(new) - len(old), 0)
    if name == "join" and args:
        items = list(args[0]) if not isinstance(args[0], str) else list(args[0])
        return sum(len(str(i)) for i in items) + len(s) * max(len(items) - 1, 0)
    if name in ("format", "format_map"):
        return _format_bound(s, (*args, *kwargs.values()))
    return len(s)


def _tojson(value: Any, indent: int | None = None, separators=None, sort_keys: bool = False) -> str:
    # transformers' tojson: no HTML escaping (jinja's would turn '<' into \u003c and change prompts).
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: Any = "") -> None:
    raise _Raised(str(message))


def _strftime_now(fmt: str = "%Y-%m-%d") -> str:
    if not isinstance(fmt, str) or len(fmt) > 200:
        raise _Refused("strftime_now takes a short format string")
    return datetime.datetime.now().strftime(fmt)


class _BoundedCodeGenerator(CodeGenerator):
    """Routes `a ~ b` (string concatenation) through a size check."""

    def visit_Concat(self, node, frame):
        self.write("environment.checked_value(")
        super().visit_Concat(node, frame)
        self.write(")")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "%", "**"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, max_chars: int):
        # optimized=False: jinja's optimizer folds constant filters at compile time ("x"*big|wordwrap(1)),
        # work that the render-time checks would never see.
        super().__init__(trim_blocks=True, lstrip_blocks=True, autoescape=False, optimized=False,
                         extensions=["jinja2.ext.loopcontrols"])
        self.max_chars = max_chars
        self.globals.pop("lipsum", None)
        self.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        self.filters["tojson"] = _tojson
        self.filters = {name: self._guard_filter(name, f) for name, f in self.filters.items()}

    def checked_value(self, value: Any) -> Any:
        return _checked(value, self.max_chars)

    def unsafe_undefined(self, obj: Any, attribute: str):
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def _guard_filter(self, name: str, func):

        @functools.wraps(func)          # keeps jinja's pass_context/pass_environment marks
        def guarded(*args, **kwargs):
            values = [a for a in args if not isinstance(a, (jinja2.runtime.Context, jinja2.Environment,
                                                             jinja2.nodes.EvalContext))]
            _check_int_args((*values[1:], *kwargs.values()))   # values[0] is the filtered value
            if name == "indent" and values and isinstance(values[0], str):
                width = values[1] if len(values) > 1 else kwargs.get("width", 4)
                per_line = len(width) if isinstance(width, str) else int(width)
                bound = len(values[0]) + (values[0].count("\n") + 1) * per_line
                if bound > self.max_chars:
                    raise _Refused(f"indent would build {bound:,} characters")
            if name == "join" and values:
                items = list(values[0])
                sep = values[1] if len(values) > 1 else kwargs.get("d", "")
                bound = sum(len(str(i)) for i in items) + len(str(sep)) * len(items)
                if bound > self.max_chars:
                    raise _Refused(f"join would build {bound:,} characters")
            if name == "format" and values and isinstance(values[0], str):
                if _format_bound(values[0], values[1:]) > self.max_chars:
                    raise _Refused("format would build too long a string")
            return _checked(func(*args, **kwargs), self.max_chars)

        return guarded

    def call_binop(self, context, operator: str, left: Any, right: Any) -> Any:
        limit = self.max_chars
        if operator == "+" and _size(left) + _size(right) > limit:
            raise _Refused(f"'+' would build {_size(left) + _size(right):,} items")
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, _SIZED) and isinstance(count, int) and _size(seq) * count > limit:
                    raise _Refused(f"'*' would build {_size(seq) * count:,} items")
            if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > 100_000:
                raise _Refused("'*' on integers this large is not allowed")
        if operator == "**" and isinstance(left, int) and isinstance(right, int):
            if abs(left) > 1 and left.bit_length() * abs(right) > 100_000:
                raise _Refused("'**' result would be too large")
        if operator == "%" and isinstance(left, str):
            args = right if isinstance(right, tuple) else (right,)
            if _format_bound(left, args) > limit:
                raise _Refused("'%' formatting would build too long a string")
        return _checked(super().call_binop(context, operator, left, right), limit)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja's own signature
        _precheck_call(__obj, args, kwargs, __self.max_chars)
        return _checked(super().call(__context, __obj, *args, **kwargs), __self.max_chars)


def _render_with_deadline(template: jinja2.Template, context: dict, deadline: float, max_chars: int) -> str:
    """Runs in the worker thread: the trace function raises once the deadline has passed."""

    def tracer(frame, event, arg):
        if time.monotonic() > deadline:
            raise _Refused("rendering the chat template took too long")
        return tracer

    sys.settrace(tracer)
    try:
        pieces, total = [], 0
        for piece in template.generate(context):
            total += len(piece)
            if total > max_chars:
                raise _Refused(f"the rendered prompt is longer than {max_chars:,} characters")
            pieces.append(piece)
        return "".join(pieces)
    finally:
        sys.settrace(None)


def compile_template(source: str, max_chars: int = MAX_CHARS) -> jinja2.Template:
    """Worker side (engine.template_worker): the sandboxed, size-checked template. Raises TemplateError."""
    try:
        return _BoundedSandbox(max_chars).from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(f"the chat template does not compile: {e.message} (line {e.lineno})") from None
    except Exception as e:   # noqa: BLE001 - any compile failure is the template's
        raise TemplateError(f"the chat template does not compile: {e}") from None


def render_compiled(template: jinja2.Template, context: dict, deadline: float, max_chars: int) -> str:
    """Worker side: render with the soft deadline (trace function) and the size checks."""
    return _render_with_deadline(template, context, deadline, max_chars)


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


def as_template_error(error: BaseException) -> TemplateError:
    return _as_template_error(error)


def _as_template_error(error: BaseException) -> TemplateError:
    if isinstance(error, TemplateError):
        return error
    if isinstance(error, _Raised):
        return TemplateError(f"the chat template rejected the conversation: {error}")
    if isinstance(error, _Refused):
        return TemplateError(f"the chat template was stopped: {error}")
    if isinstance(error, SecurityError):
        return TemplateError(f"the chat template tried something the sandbox forbids: {error}")
    if isinstance(error, jinja2.TemplateError):
        return TemplateError(f"the chat template failed: {error}")
    if isinstance(error, RecursionError):
        return TemplateError("the chat template recursed too deeply")
    if isinstance(error, MemoryError):
        return TemplateError("the chat template ran out of memory")
    return TemplateError(f"the chat template failed: {type(error).__name__}: {error}")


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
