"""Values into Markdown that renders as written: a ``|`` never splits a table row, ``user@host`` never
becomes a mail link, and a ``*`` or ``_`` in a name never turns into emphasis.

Every value that goes into an artifact's Markdown passes through :func:`text`
(prose and table cells) or :func:`code` (identifiers, shown as code). Both
give one line: a newline would end a table row too.
"""

from __future__ import annotations

import re

__all__ = ["code", "text"]

_PUNCTUATION = re.compile(r"([\\`*_\[\]<>|@~#!])")


def _one_line(value: object) -> str:
    return " ".join(str(value).split())


def text(value: object) -> str:
    """``value`` as literal Markdown text: its Markdown punctuation backslash-escaped."""
    return _PUNCTUATION.sub(r"\\\1", _one_line(value))


def code(value: object) -> str:
    """``value`` as a code span; a ``|`` inside is escaped, as GitHub-flavoured tables require even there."""
    body = _one_line(value).replace("`", "'").replace("|", "\\|")
    return f"`{body}`"
