"""One CSV or JSON Lines file parsed by pyarrow into records: a row's key and value, or why it has none.

The format comes from the name: ``.csv`` is CSV with a header line, ``.jsonl``
and ``.ndjson`` are JSON Lines (one object per line). A file is read whole
(neither format has an index to seek by), and its records come in a fixed
order, so a shard's block of records is the same on every read:

* CSV: the rows pyarrow parsed, in file order, then the lines it could not
  parse (a wrong number of fields), by line number; the text and input columns
  are read as text, the key's type is inferred (integers, else text);
* JSON Lines: one record per non-blank line, in line order. pyarrow parses the
  whole file at once; when a line is not JSON it parses the file line by line
  instead, to find the lines that are not.

A row without a readable key (an unparsable line, a key missing, null or
empty) is still a record, keyed by its place (``data/a.csv line 7``,
``data/a.csv row 3``) and holding the :class:`~shardwise.errors.InputError`
that says why, so that the source can count it and say where it is. A file
that cannot be read at all (not UTF-8, a column missing from it) is one
:class:`~shardwise.errors.SourceError` or :class:`~shardwise.errors.ConfigError`
line naming it.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.json as pa_json

from shardwise.errors import ConfigError, InputError, SourceError
from shardwise.model.text import row_value
from shardwise.sources.base import Key

__all__ = ["FORMATS", "SUFFIXES", "ParsedFile", "Record", "file_format", "is_csv_jsonl_name", "parse_file"]

Format = Literal["csv", "jsonl"]
FORMATS: dict[str, Format] = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
SUFFIXES = tuple(FORMATS)
_LABEL = {"csv": "CSV", "jsonl": "JSON Lines"}


@dataclass(frozen=True, slots=True)
class Record:
    """One row of a file: its key and value, or its place and the InputError saying why it has no key."""

    key: Key
    value: Any
    place: str
    """Where the row is, for messages and as the key of a row without one: ``a.csv row 3``."""
    keyed: bool
    """Whether ``key`` is the row's own key (False: its place)."""


@dataclass(frozen=True, slots=True)
class ParsedFile:
    records: list[Record]
    key_type: Literal["int", "text"] | None
    """The key column's type in this file; None when no row has a key."""


def is_csv_jsonl_name(name: str) -> bool:
    """Whether a listed name is read: names ending in ``.csv``, ``.jsonl`` or ``.ndjson`` (any case)."""
    return name.lower().endswith(SUFFIXES)


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
    if fmt == "csv":
        table, bad = _csv(data, where, inputs)
        places = [f"{where} row {i + 1}" for i in range(table.num_rows)]
    else:
        table, places, bad = _jsonl(data, where)
    if table.num_rows:
        _check_columns(table, (key, *inputs), f"{_LABEL[fmt]} file {where!r}")
    records, key_type = _records(table, places, key, inputs)
    records += [Record(place, _unparsable(place, fmt, why), place, False) for place, why in bad]
    if fmt == "jsonl":
        records.sort(key=lambda r: _number(r.place))
    return ParsedFile(records, key_type)


def _csv(data: bytes, where: str, inputs: Sequence[str]) -> tuple[pa.Table, list[tuple[str, str]]]:
    bad: list[tuple[str, str]] = []

    def invalid(row: Any) -> str:
        line = "a line" if row.number is None else f"line {row.number}"
        bad.append(
            (f"{where} {line}", f"{row.actual_columns} fields where the header has {row.expected_columns}")
        )
        return "skip"

    try:
        table = pa_csv.read_csv(
            io.BytesIO(data),
            read_options=pa_csv.ReadOptions(use_threads=False),  # one thread: bad lines come in order
            parse_options=pa_csv.ParseOptions(newlines_in_values=True, invalid_row_handler=invalid),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in inputs}, strings_can_be_null=True
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _unreadable("CSV", where, exc) from exc
    bad.sort(key=lambda item: _number(item[0]))
    return table, bad


def _jsonl(data: bytes, where: str) -> tuple[pa.Table, list[str], list[tuple[str, str]]]:
    """The parsed rows, each row's place (its line), and the lines that are not JSON objects with why."""
    lines = [(n + 1, line) for n, line in enumerate(data.split(b"\n")) if line.strip()]
    places = [f"{where} line {n}" for n, _ in lines]
    try:
        table = _read_json(data)
        if table.num_rows == len(places):
            return table, places, []
    except pa.ArrowInvalid:
        pass  # some line is not JSON: find which, line by line
    tables, good, bad = [], [], []
    for (_, line), place in zip(lines, places, strict=True):
        try:
            tables.append(_read_json(line))
            good.append(place)
        except pa.ArrowInvalid as exc:
            bad.append((place, _first_line(exc).removesuffix(" in row 0")))
    try:
        table = pa.concat_tables(tables, promote_options="permissive") if tables else pa.table({})
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise _unreadable("JSON Lines", where, exc) from exc
    return table, good, bad


def _read_json(data: bytes) -> pa.Table:
    return pa_json.read_json(io.BytesIO(data), read_options=pa_json.ReadOptions(use_threads=False))


def _records(
    table: pa.Table, places: Sequence[str], key: str, inputs: Sequence[str]
) -> tuple[list[Record], Literal["int", "text"] | None]:
    if not table.num_rows:
        return [], None
    column = table.column(key)
    key_type: Literal["int", "text"] | None = "int" if pa.types.is_integer(column.type) else "text"
    if pa.types.is_null(column.type):
        key_type = None
    elif key_type == "text" and not pa.types.is_string(column.type):
        column = column.cast(pa.string())
    keys = column.to_pylist()
    values = [table.column(name).to_pylist() for name in inputs]
    records = []
    for i, (row_key, place) in enumerate(zip(keys, places, strict=True)):
        if row_key is None or row_key == "":
            records.append(Record(place, _keyless(place, key), place, False))
        else:
            records.append(Record(row_key, row_value([v[i] for v in values], inputs), place, True))
    return records, key_type


def _check_columns(table: pa.Table, wanted: Sequence[str], what: str) -> None:
    for name in wanted:
        if name not in table.column_names:
            raise ConfigError(
                f"column {name!r} is not in {what}; its columns are: {', '.join(table.column_names)}; "
                "pass the right --key, --text-column or input column, or fix the file"
            )


def _unparsable(place: str, fmt: Format, why: str) -> InputError:
    return InputError(f"{place} is not valid {_LABEL[fmt]} ({why}); fix the line, then redrive the run")


def _keyless(place: str, key: str) -> InputError:
    return InputError(
        f"{place} has no key {key!r} (missing, null or empty), so it cannot be scored: results are found "
        "by their key; set the key, then redrive the run"
    )


def _unreadable(label: str, where: str, exc: Exception) -> SourceError:
    return SourceError(f"{label} file {where!r} cannot be read: {_first_line(exc)}; fix or remove the file")


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _number(place: str) -> int:
    tail = place.rsplit(" ", 1)[-1]
    return int(tail) if tail.isdigit() else 0
