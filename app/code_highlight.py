"""Syntax colours for code blocks, from Pygments (a well-kept highlighter): character spans and colours,
which the chat view applies to Qt's text document. Light and dark themes use a Pygments style each."""
from __future__ import annotations

from functools import lru_cache

from pygments import lex
from pygments.lexers import TextLexer, get_lexer_by_name
from pygments.styles import get_style_by_name
from pygments.util import ClassNotFound

STYLES = {False: "default", True: "github-dark"}     # light, dark


@lru_cache(maxsize=64)
def _lexer(language: str):
    try:
        return get_lexer_by_name(language, stripnl=False, ensurenl=False) if language else TextLexer()
    except ClassNotFound:
        return TextLexer()


@lru_cache(maxsize=2)
def _style(dark: bool):
    return get_style_by_name(STYLES[dark])


def highlight_spans(code: str, language: str, dark: bool) -> list[tuple[int, int, str]]:
    """(start, length, "#rrggbb") for each token the style colours; uncoloured text is left out."""
    style, spans, pos = _style(dark), [], 0
    for token, value in lex(code, _lexer(language.lower())):
        color = _color(style, token)
        if color and value:
            spans.append((pos, len(value), "#" + color))
        pos += len(value)
    return spans


def _color(style, token) -> str | None:
    """The token's colour in `style`, from its nearest ancestor the style knows, as Pygments' own formatters
    do: a lexer's token type a style has never heard of (YAML's Literal.Scalar.Plain, ~30 lexers' others)
    makes style_for_token raise KeyError."""
    while not style.styles_token(token) and token.parent is not None:
        token = token.parent
    return style.style_for_token(token).get("color")
