"""Where a CSV file's quoted values start and how many lines they span, as pyarrow reads them.

pyarrow reads a value that opens a quote up to the quote that closes it,
line breaks included. A quote left open therefore swallows every line after
it, and at the end of the file pyarrow keeps what it swallowed as one value,
without an error: the rows in it are lost in silence. This scan finds such
values, so that a quote open at the end of the file refuses the file and a
value spanning many lines is warned about.

The scan follows pyarrow's rules (its defaults: ``,`` between fields, ``"``
quotes, ``""`` a quote inside a quoted value, no escape character): a quote
opens a value only at the start of a field; a quote inside an unquoted field
is a character of it; after a closing quote the field goes on, unquoted, to
the next ``,`` or line break.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_VALUE_LINES", "QuotedValues", "scan_quotes"]

MAX_VALUE_LINES = 100
"""A quoted value spanning more lines than this is warned about: it is most likely a quote left open."""

# A quote at the start of a field (the start of the file, or after a comma or a line break), then the
# value up to its closing quote, if any. Neither branch of the repeat can match a lone quote, so the repeat
# stops at the closing quote or at the end of the file, and a match never backtracks.
_QUOTED = re.compile(rb'"(?<=(?<![^,\r\n])")(?:[^"]+|"")*("?)')


@dataclass(frozen=True, slots=True)
class QuotedValues:
    """What the scan found: the line of a quote still open at the end of the file, and the long values."""

    unclosed_line: int | None
    """The line the quoted value left open at the end of the file starts on; None when every quote closes."""
    long_values: list[tuple[int, int]]
    """(first line, lines spanned) of each quoted value spanning more than :data:`MAX_VALUE_LINES` lines."""


def scan_quotes(data: bytes) -> QuotedValues:
    """Scan the CSV bytes ``data`` for quoted values; lines are counted from 1, the header's included."""
    unclosed, long_values = None, []
    for match in _QUOTED.finditer(data):
        start, end = match.span()
        if not match.group(1):  # no closing quote: the repeat ran to the end of the file
            unclosed = _line(data, start)
        # A value of more than N lines holds at least N line breaks: count only in values that long.
        if end - start > MAX_VALUE_LINES and (spanned := data.count(b"\n", start, end) + 1) > MAX_VALUE_LINES:
            long_values.append((_line(data, start), spanned))
    return QuotedValues(unclosed, long_values)


def _line(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1
