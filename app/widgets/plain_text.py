"""Untrusted text (chat titles, model names from a file's metadata, a server's error) shown as written.

Qt guesses rich text for a label whose text or a tooltip that looks like HTML (Qt::mightBeRichText): it then obeys
the tags and loads an <img src="..."> file. Labels that show such text are PlainText; a tooltip cannot be told, so
it is given as escaped rich text.
"""
from __future__ import annotations

import html


def plain_tooltip(text: str) -> str:
    """A tooltip showing `text` exactly (line breaks too). Text without "<" is never taken for rich text, so it
    stays as it is; "" stays "" (no tooltip)."""
    return f"<p style='white-space:pre-wrap'>{html.escape(text)}</p>" if "<" in text else text
