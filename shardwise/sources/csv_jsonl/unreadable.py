"""What makes a CSV or JSON Lines file unreadable as a whole: it is not UTF-8 text, or a row is too long.

Such a file is refused in one :class:`~shardwise.errors.SourceError` line
that names it, says what is wrong and where (its line), and how to fix it.
"""

from __future__ import annotations

import codecs

from shardwise.errors import SourceError

__all__ = ["MAX_ROW_BYTES", "MIB", "check_text", "first_line", "line_of", "unreadable"]

MAX_ROW_BYTES = 16 * 1024 * 1024
"""The most bytes a CSV row or JSON Lines line may hold: pyarrow reads in blocks, and a row must fit one."""
MIB = f"{MAX_ROW_BYTES >> 20} MiB"

_MARKS = (  # UTF-32's marks first: UTF-32 LE's begins with UTF-16 LE's
    (codecs.BOM_UTF32_LE, "UTF-32"),
    (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"),
    (codecs.BOM_UTF16_BE, "UTF-16"),
)
_PIECE = 1 << 24


def unreadable(what: str, why: str, fix: str) -> SourceError:
    """``CSV file 'a.csv' cannot be read: {why}; {fix}``, ``what`` naming the file."""
    return SourceError(f"{what} cannot be read: {why}; {fix}")


def check_text(data: bytes, what: str) -> None:
    """Refuse what is not UTF-8 text: a UTF-16 or UTF-32 file, a NUL byte, a byte UTF-8 does not allow."""
    for mark, encoding in _MARKS:
        if data.startswith(mark):
            why = f"it is {encoding} (it starts with {encoding}'s byte-order mark), not UTF-8"
            raise unreadable(what, why, "save it as UTF-8")
    if (nul := data.find(b"\x00")) >= 0:
        why = f"line {line_of(data, nul)} holds a NUL byte, which UTF-8 text does not (is it UTF-16?)"
        raise unreadable(what, why, "save it as UTF-8")
    if (bad := _not_utf8(data)) is not None:
        why = f"line {line_of(data, bad)} holds byte 0x{data[bad]:02x}, which is not UTF-8 (is it Latin-1?)"
        raise unreadable(what, why, "save it as UTF-8")


def line_of(data: bytes, offset: int) -> int:
    """The line (from 1) of the byte at ``offset``."""
    return data.count(b"\n", 0, offset) + 1


def first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _not_utf8(data: bytes) -> int | None:
    """The offset of the first byte that is not UTF-8, or None; decodes in pieces, so memory stays flat."""
    view, at = memoryview(data), 0
    while at < len(data):
        end = min(at + _PIECE, len(data))
        try:
            _, used = codecs.utf_8_decode(view[at:end], "strict", end == len(data))
        except UnicodeDecodeError as exc:
            return at + exc.start
        at += used  # a character cut at the piece's end is decoded with the next piece
    return None
