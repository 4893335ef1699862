"""A CSV file's bytes as a pyarrow table of text, and the lines that do not parse.

Every column is read as text, and only an empty field is NULL, so a value
stays as written (``NA``, ``null``, ``01``, ``1.50``). pyarrow reads a quoted
value across line breaks, so a quote left open swallows the lines after it
(see :mod:`~shardwise.sources.csv_jsonl.quotes`): one open at the end of the
file makes the file unreadable, one spanning many lines is a warning. A row
holds at most :data:`~shardwise.sources.csv_jsonl.unreadable.MAX_ROW_BYTES`.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

from shardwise.errors import SourceError
from shardwise.sources.csv_jsonl.quotes import MAX_VALUE_LINES, scan_quotes
from shardwise.sources.csv_jsonl.unreadable import MAX_ROW_BYTES, MIB, first_line, unreadable

__all__ = ["read_csv"]

_BLOCK = MAX_ROW_BYTES + 2  # a row and its line break


def read_csv(data: bytes, where: str) -> tuple[pa.Table, list[tuple[int, str]], list[str]]:
    """The rows, every column text; each line that does not parse, with why; and the warnings."""
    bad: list[tuple[int, str]] = []
    broken = False  # whether a line that does not parse holds a line break: a quote may have swallowed it

    def invalid(row: Any) -> str:
        nonlocal broken
        bad.append(
            (row.number or 0, f"{row.actual_columns} fields where the header has {row.expected_columns}")
        )
        broken = broken or "\n" in row.text or "\r" in row.text
        return "skip"

    try:
        table = _read(data, _header(data, where), invalid)
        if not all(pa.types.is_string(t) for t in table.schema.types):  # pyarrow read the header otherwise
            bad.clear()
            table = _read(data, table.column_names, invalid)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _why_unreadable(data, where, exc) from exc
    warnings = _quotes(data, where) if broken or _has_line_breaks(table) else []
    _check_row_sizes(table, where)
    return table, sorted(bad), warnings


def _read(data: bytes, names: Sequence[str], invalid: Any) -> pa.Table:
    return pa_csv.read_csv(
        io.BytesIO(data),
        read_options=pa_csv.ReadOptions(use_threads=False, block_size=_BLOCK),  # bad lines come in order
        parse_options=pa_csv.ParseOptions(newlines_in_values=True, invalid_row_handler=invalid),
        convert_options=pa_csv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()), null_values=[""], strings_can_be_null=True
        ),
    )


def _header(data: bytes, where: str) -> list[str]:
    """The names of the header (the first line that is not blank), to read every column as text."""
    text = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", newline="")
    try:
        return next((row for row in csv.reader(text) if row), [])
    except csv.Error as exc:  # a header field over the csv module's limit: a quote left open, most likely
        raise _why_unreadable(data, where, exc) from exc


def _has_line_breaks(table: pa.Table) -> bool:
    """Whether a name or a value holds a line break (every column is text)."""
    if any("\n" in name or "\r" in name for name in table.column_names):
        return True
    return any(pc.any(pc.match_substring_regex(column, "[\r\n]")).as_py() for column in table.columns)


def _quotes(data: bytes, where: str) -> list[str]:
    """Refuse a quote left open at the end of the file; warn of each quoted value of many lines."""
    found = scan_quotes(data)
    if found.unclosed_line is not None:
        raise _unclosed(where, found.unclosed_line)
    return [
        f"CSV file {where!r}: the quoted value starting on line {line} spans {spanned:,} lines (more than "
        f"{MAX_VALUE_LINES}); if a quote is missing there, the rows it swallowed are not scored: check the "
        "quotes from that line"
        for line, spanned in found.long_values
    ]


def _check_row_sizes(table: pa.Table, where: str) -> None:
    """Refuse a row whose values hold more than MAX_ROW_BYTES (pyarrow reads some such rows, not all)."""
    sizes = None
    for column in table.columns:
        lengths = pc.fill_null(pc.binary_length(column), 0).cast(pa.int64())
        sizes = lengths if sizes is None else pc.add(sizes, lengths)
    if sizes is None or not len(sizes) or pc.max(sizes).as_py() <= MAX_ROW_BYTES:
        return
    row = pc.index(pc.greater(sizes, MAX_ROW_BYTES), True).as_py()
    why = f"the values of row {row + 1} hold {sizes[row].as_py():,} bytes, more than the {MIB} a row may hold"
    raise unreadable(f"CSV file {where!r}", why, "split or shorten its values")


def _why_unreadable(data: bytes, where: str, exc: Exception) -> SourceError:
    """Why pyarrow could not read the file: a quote left open, a row too long, or what pyarrow said."""
    unclosed = scan_quotes(data).unclosed_line
    if unclosed is not None:
        return _unclosed(where, unclosed)
    if "straddling object" in str(exc):  # a row longer than a block
        line, size = _longest_line(data)
        what = (
            f"line {line} is {size:,} bytes long, more"
            if size > MAX_ROW_BYTES
            else "a row of lines is longer"
        )
        why = f"{what} than the {MIB} a row may hold"
        return unreadable(f"CSV file {where!r}", why, "split or shorten its values")
    return unreadable(f"CSV file {where!r}", first_line(exc), "fix or remove the file")


def _unclosed(where: str, line: int) -> SourceError:
    return unreadable(
        f"CSV file {where!r}",
        f"the quoted value starting on line {line} is never closed, so it runs past the end of the file, "
        "swallowing every line after it",
        'close its quote (a quote inside a quoted value is written twice: "")',
    )


def _longest_line(data: bytes) -> tuple[int, int]:
    """(line number, bytes) of the longest line."""
    longest, at, number = (1, 0), 0, 1
    while at <= len(data):
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        if end - at > longest[1]:
            longest = (number, end - at)
        at, number = end + 1, number + 1
    return longest
