"""The sandbox that compiles and renders chat templates: worker side only (engine.template_worker).

The rules are engine.chat_template's (its docstring); jinja2 is imported here alone, so a process that
only asks the worker (the engine, the app) never loads it (~7 MiB resident).
"""
from __future__ import annotations

import datetime
import functools
import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

import jinja2
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

from engine.chat_template import MAX_CHARS
from engine.errors import TemplateError

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


