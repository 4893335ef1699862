"""One CSV or JSON Lines file parsed by pyarrow into records: a row's key and value, or why it has none.

The format comes from the name: ``.csv`` is CSV with a header line, ``.jsonl``
and ``.ndjson`` are JSON Lines (one object per line). A file is read whole
(neither format has an index to seek by), and its records come in a fixed
order, so a shard's block of records is the same on every read:

* CSV: the rows pyarrow parsed, in file order, then the lines it could not
  parse (a wrong number of fields), by line number. Every column is read as
  text, as written (see :mod:`~shardwise.sources.csv_jsonl.csv_table`); the
  key is then an integer when every value is one written canonically
  (``7``, ``-7``: not ``07``, ``+7`` or ``7.0``, and within int64), else
  text, so that no two keys collide;
* JSON Lines: one record per non-blank line, in line order, its values as
  JSON typed them. pyarrow parses the whole file at once; when a line is not
  one JSON object it parses the file line by line instead, to find the lines
  that are not.

A row without a readable key (an unparsable line, a key missing, null or
empty) is still a record, keyed by its place (``data/a.csv line 7``,
``data/a.csv row 3``) and holding the :class:`~shardwise.errors.InputError`
that says why, so that the source can count it and say where it is; a JSON
Lines line over :data:`~shardwise.sources.csv_jsonl.unreadable.MAX_ROW_BYTES`
is such a line. A file that cannot be read at all (not UTF-8 text, a CSV
quote left open, a CSV row too long, a column missing from it) is one
:class:`~shardwise.errors.SourceError` or :class:`~shardwise.errors.ConfigError`
line naming it (see :mod:`~shardwise.sources.csv_jsonl.unreadable`).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json

from shardwise.errors import ConfigError, InputError
from shardwise.model.text import row_value
from shardwise.sources.base import Key
from shardwise.sources.csv_jsonl.csv_table import read_csv
from shardwise.sources.csv_jsonl.unreadable import MAX_ROW_BYTES, MIB, check_text, first_line, unreadable

__all__ = [
    "FORMATS",
    "SUFFIXES",
    "ParsedFile",
    "Record",
    "Skip",
    "file_format",
    "parse_file",
]

Format = Literal["csv", "jsonl"]
FORMATS: dict[str, Format] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
SUFFIXES = tuple(FORMATS)
_LABEL = {"csv": "CSV", "jsonl": "JSON Lines"}
_BLOCK = MAX_ROW_BYTES + 2  # a line and its line break
_CANONICAL_INT = r"^(0|-?[1-9][0-9]*)$"  # as str(int) writes it: no '+', no leading zero, no '-0'

Skip = Literal["null_key", "unparsable"]
"""Why a row is skipped: its key is missing, null or empty, or its line does not parse."""


@dataclass(frozen=True, slots=True)
class Record:
    """One row of a file: its key and value, or its place and the InputError saying why it has no key."""

    key: Key
    value: Any
    place: str
    """Where the row is, for messages and as the key of a row without one: ``a.csv row 3``."""
    skipped: Skip | None = None
    """Why the row has no key of its own (``key`` is then its place); None when it has one."""

    @property
    def keyed(self) -> bool:
        """Whether ``key`` is the row's own key (False: its place)."""
        return self.skipped is None


@dataclass(frozen=True, slots=True)
class ParsedFile:
    records: list[Record]
    key_type: Literal["int", "text"] | None
    """The key column's type in this file; None when no row has a key."""
    warnings: list[str] = field(default_factory=list)
    """What reads but looks wrong (a quoted value of many lines), a line each naming the file."""


def file_format(name: str) -> Format:
    """``csv`` or ``jsonl``, from the name's suffix; a file named outright with another is refused."""
    for suffix, found in FORMATS.items():
        if name.lower().endswith(suffix):
            return found
    raise ConfigError(
        f"file {name!r} is neither CSV nor JSON Lines: its name must end in {', '.join(SUFFIXES)}; rename it"
    )


def parse_file(data: bytes, name: str, where: str, key: str, inputs: Sequence[str]) -> ParsedFile:
    """The records of the file ``name`` (its bytes ``data``; ``where`` names it in messages)."""
    fmt = file_format(name)
    what = f"{_LABEL[fmt]} file {where!r}"
    check_text(data, what)
    warnings: list[str] = []
    if fmt == "csv":
        table, lines, warnings = read_csv(data, where)
        places = [f"{where} row {i + 1}" for i in range(table.num_rows)]
        bad = [(f"{where} line {n}" if n else f"{where} a line", why) for n, why in lines]
    else:
        table, places, bad = _jsonl(data, where)
    if table.num_rows:
        _check_columns(table, (key, *inputs), what)
        if fmt == "csv":
            table = _typed_key(table, key)
    records, key_type = _records(table, places, key, inputs)
    records += [Record(place, _unparsable(place, fmt, why), place, "unparsable") for place, why in bad]
    if fmt == "jsonl":
        records.sort(key=lambda r: _number(r.place))
    return ParsedFile(records, key_type, warnings)


def _jsonl(data: bytes, where: str) -> tuple[pa.Table, list[str], list[tuple[str, str]]]:
    """The parsed rows, each row's place (its line), and the lines that are not one JSON object, with why."""
    lines = [(n + 1, line) for n, line in enumerate(data.split(b"\n")) if line.strip()]
    places = [f"{where} line {n}" for n, _ in lines]
    if all(len(line) <= MAX_ROW_BYTES for _, line in lines):
        try:
            table = _read_json(data)
            if table.num_rows == len(places):
                return table, places, []
        except pa.ArrowInvalid:
            pass  # some line is not one JSON object: find which, line by line
    tables, good, bad = [], [], []
    for (_, line), place in zip(lines, places, strict=True):
        parsed = _json_line(line)
        if isinstance(parsed, str):
            bad.append((place, parsed))
        else:
            tables.append(parsed)
            good.append(place)
    try:
        table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise unreadable(f"JSON Lines file {where!r}", first_line(exc), "fix or remove the file") from exc
    return table, good, bad


def _json_line(line: bytes) -> pa.Table | str:
    """The line's one row, or why it is not one JSON object."""
    if len(line) > MAX_ROW_BYTES:
        return f"it is {len(line):,} bytes long, more than the {MIB} a line may hold"
    try:
        table = _read_json(line)
    except pa.ArrowInvalid as exc:
        return first_line(exc).removesuffix(" in row 0")
    if table.num_rows != 1:
        return f"it holds {table.num_rows} JSON objects, where a line holds one"
    return table


def _read_json(data: bytes) -> pa.Table:
    options = pa_json.ReadOptions(use_threads=False, block_size=_BLOCK)
    return pa_json.read_json(io.BytesIO(data), read_options=options)


def _typed_key(table: pa.Table, key: str) -> pa.Table:
    """The CSV ``table`` with its key as int64 when every key is an integer written canonically."""
    column = table.column(key)
    if column.null_count == len(column):
        return table
    if not pc.all(pc.match_substring_regex(column, _CANONICAL_INT)).as_py():
        return table
    try:
        ints = column.cast(pa.int64())
    except pa.ArrowInvalid:  # beyond int64: text, so that no two keys collide
        return table
    return table.set_column(table.column_names.index(key), key, ints)


def _records(
    table: pa.Table, places: Sequence[str], key: str, inputs: Sequence[str]
) -> tuple[list[Record], Literal["int", "text"] | None]:
    if not table.num_rows:
        return [], None
    column = table.column(key)
    key_type: Literal["int", "text"] | None = "int" if pa.types.is_integer(column.type) else "text"
    if column.null_count == len(column):
        key_type = None
    elif key_type == "text" and not pa.types.is_string(column.type):
        column = column.cast(pa.string())
    keys = column.to_pylist()
    values = [table.column(name).to_pylist() for name in inputs]
    records = []
    for i, (row_key, place) in enumerate(zip(keys, places, strict=True)):
        if row_key is None or row_key == "":
            records.append(Record(place, _keyless(place, key), place, "null_key"))
        else:
            records.append(Record(row_key, row_value([v[i] for v in values], inputs), place))
    return records, key_type


def _check_columns(table: pa.Table, wanted: Sequence[str], what: str) -> None:
    for name in wanted:
        if name not in table.column_names:
            raise ConfigError(
                f"column {name!r} is not in {what}; its columns are: {', '.join(table.column_names)}; "
                "pass the right --key, --text-column or input column, or fix the file"
            )


_AGAIN = "run again (with --only-new, only the files changed are read)"


def _unparsable(place: str, fmt: Format, why: str) -> InputError:
    return InputError(f"{place} is not valid {_LABEL[fmt]} ({why}); fix the line, then {_AGAIN}")


def _keyless(place: str, key: str) -> InputError:
    return InputError(
        f"{place} has no key {key!r} (missing, null or empty), so it cannot be scored: results are found "
        f"by their key; set the key, then {_AGAIN}"
    )


def _number(place: str) -> int:
    tail = place.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
