"""The database computes every column type's input fingerprint as Python does, so --only-new skips what
did not change.

A column type whose fingerprint differs between SQL and Python makes every
one of its rows "changed" on every run: ``--only-new`` then rescored a whole
jsonb text column each time (issue 24). Each test stores, as the pipeline
does, :func:`~shardwise.lineage.value_fingerprint` of each value as the
source read it, and asks the database which rows are new: exactly those
without a fingerprint (NULL, not text), which the engine dead-letters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from spec_builder import flat_spec
from sql_tables import writer

from shardwise.lineage import value_fingerprint
from shardwise.sources.base import Key, NewOnly
from shardwise.sources.sql.source import SqlSource

# (column type, SQL literals of rows 1..n); NULL and values that are not text have no fingerprint.
PG_TYPES: dict[str, tuple[str, list[str]]] = {
    "text": ("text", ["'héllo ✓ 🙂'", "'  padded  '", "''", "NULL"]),
    "varchar": ("varchar(40)", ["'héllo ✓'", "'trailing  '", "NULL"]),
    "char": ("char(12)", ["'héllo'", "'ab  '", "NULL"]),
    "citext": ("citext", ["'MiXeD Case é'", "NULL"]),
    "jsonb": (
        "jsonb",
        ['\'"héllo \\" ✓"\'', "'\"line\\nbreak \\u00e9\"'", '\'{"a": "text"}\'', "'42'", "'null'", "NULL"],
    ),
    "json": ("json", ["'\"héllo \\u00e9 ✓\"'", "'  \"spaced\"  '", "'[\"a\"]'", "'true'", "NULL"]),
    "enum": ("mood", ["'happy'", "'sad'", "NULL"]),
    "xml": ("xml", ["'<p>héllo</p>'", "NULL"]),
    "domain": ("textish", ["'in a domain'", "NULL"]),
    "jsonb domain": ("jsonish", ["'\"a json string in a domain\"'", "'{}'", "NULL"]),
    "bytea": ("bytea", ["'héllo'::bytea", "'\\xff00'::bytea", "NULL"]),
    "integer": ("integer", ["7", "NULL"]),
    "numeric": ("numeric", ["1.50", "NULL"]),
    "text[]": ("text[]", ["ARRAY['a', 'b']", "NULL"]),
    "uuid": ("uuid", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'", "NULL"]),
}
PG_SETUP = [
    "CREATE EXTENSION IF NOT EXISTS citext",
    "CREATE TYPE mood AS ENUM ('happy', 'sad')",
    "CREATE DOMAIN textish AS text",
    "CREATE DOMAIN jsonish AS jsonb",
]


def _table(url: str, column_type: str, literals: list[str], setup: Sequence[str] = ()) -> None:
    with writer(url) as eng, eng.begin() as conn:
        for statement in setup:
            conn.execute(sa.text(statement))
        conn.execute(sa.text(f"CREATE TABLE docs (id BIGINT PRIMARY KEY, body {column_type})"))
        for key, literal in enumerate(literals, start=1):
            conn.execute(sa.text(f"INSERT INTO docs VALUES ({key}, {literal})"))


def _read(url: str) -> dict[Key, Any]:
    with SqlSource(url, "docs", "id", "body") as src:
        plan = src.plan()
        return {row.key: row.value for shard in plan.shards for row in src.read(plan, shard)}


def _store_fingerprints(url: str, values: dict[Key, Any]) -> list[Key]:
    """Store what the pipeline stores for each row with a fingerprint; the keys of the others."""
    prints = {k: value_fingerprint(v) for k, v in values.items()}
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS results"))
        conn.execute(
            sa.text(
                "CREATE TABLE results (source_key BIGINT NOT NULL, model_version TEXT NOT NULL, "
                "input_fingerprint TEXT NOT NULL, PRIMARY KEY (source_key, model_version))"
            )
        )
        stored = [{"k": k, "f": f} for k, f in prints.items() if f is not None]
        if stored:
            conn.execute(sa.text("INSERT INTO results VALUES (:k, 'm1', :f)"), stored)
    return sorted(k for k, f in prints.items() if f is None)


def _new_keys(url: str) -> list[Key]:
    with SqlSource(url, "docs", "id", "body") as src:
        plan = src.plan(new_only=NewOnly("m1", "results"))
        return sorted(row.key for shard in plan.shards for row in src.read(plan, shard))


@pytest.mark.postgres
@pytest.mark.parametrize("name", list(PG_TYPES))
def test_postgres_fingerprints_every_column_type_as_python_does(pg_url: str, name: str) -> None:
    column_type, literals = PG_TYPES[name]
    _table(pg_url, column_type, literals, PG_SETUP)
    values = _read(pg_url)
    assert len(values) == len(literals)
    without = _store_fingerprints(pg_url, values)
    assert _new_keys(pg_url) == without, {k: values[k] for k in _new_keys(pg_url)}


SQLITE_TYPES: dict[str, tuple[str, list[str]]] = {
    "TEXT": ("TEXT", ["'héllo ✓'", "'  x  '", "NULL", "7"]),
    "VARCHAR": ("VARCHAR(3)", ["'longer than three'", "NULL"]),
    "CHAR": ("CHAR(10)", ["'ab'", "NULL"]),
    "JSON": ("JSON", ["'\"héllo \\u00e9 ✓\"'", "'\"a\\\\b\"'", "'{\"a\": 1}'", "'null'", "NULL"]),
    "BLOB": ("BLOB", ["CAST('héllo' AS BLOB)", "x'ff00'", "NULL"]),
}


@pytest.mark.parametrize("name", list(SQLITE_TYPES))
def test_sqlite_fingerprints_every_declared_type_as_python_does(sqlite_url: str, name: str) -> None:
    column_type, literals = SQLITE_TYPES[name]
    _table(sqlite_url, column_type, literals)
    values = _read(sqlite_url)
    without = _store_fingerprints(sqlite_url, values)
    assert _new_keys(sqlite_url) == without, {k: values[k] for k in _new_keys(sqlite_url)}


JSON_TEXTS = ['"héllo ✓ 🙂, a paragraph"', '"with \\"quotes\\" and \\\\ and \\n"', '"plain words"']
JSON_BAD = ['{"text": "an object"}', "null"]  # not text: dead letters on every run


def _json_docs(url: str, column_type: str) -> None:
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE docs (id BIGINT PRIMARY KEY, body {column_type})"))
        conn.execute(
            sa.text("INSERT INTO docs VALUES (:k, :v)"),
            [{"k": k, "v": v} for k, v in enumerate([*JSON_TEXTS, *JSON_BAD])],
        )


def _twice(url: str, pipeline: Any) -> tuple[Any, Any]:
    spec = flat_spec(model="tiny",
        source=url, results=url, results_table="scores", table="docs", text_column="body", only_new=True,
    )  # fmt: skip
    return pipeline.run(spec, "first")[1], pipeline.run(spec, "second")[1]


@pytest.mark.postgres
def test_only_new_twice_on_a_jsonb_text_column_scores_nothing_the_second_time(
    pg_url: str, pipeline: Any
) -> None:
    """The issue's run: the second --only-new run read every row of a jsonb column again."""
    _json_docs(pg_url, "jsonb")
    first, second = _twice(pg_url, pipeline)
    assert (first.rows_in, first.rows_out, first.rows_failed) == (5, 3, 2)
    assert (second.rows_in, second.rows_out, second.rows_failed) == (2, 0, 2), "only the dead letters"


@pytest.mark.postgres
def test_only_new_twice_on_a_json_column_scores_nothing_the_second_time(pg_url: str, pipeline: Any) -> None:
    _json_docs(pg_url, "json")
    first, second = _twice(pg_url, pipeline)
    assert (first.rows_out, second.rows_in, second.rows_out) == (3, 2, 0)


def test_only_new_twice_on_a_sqlite_json_column_scores_nothing_the_second_time(
    sqlite_url: str, pipeline: Any
) -> None:
    _json_docs(sqlite_url, "JSON")
    first, second = _twice(sqlite_url, pipeline)
    assert (first.rows_out, second.rows_in, second.rows_out) == (3, 2, 0)


PARQUET_TYPES = {
    "string": pa.string(),
    "large_string": pa.large_string(),
    "dictionary": pa.dictionary(pa.int32(), pa.string()),
    "binary": pa.binary(),
}


@pytest.mark.parametrize("name", list(PARQUET_TYPES))
def test_only_new_twice_on_parquet_reads_nothing_the_second_time(
    tmp_path: Path, sqlite_url: str, name: str, pipeline: Any
) -> None:
    """Parquet's only-new goes by object and ETag, whatever the text column's type."""
    data = tmp_path / "data"
    data.mkdir()
    texts = ["héllo ✓ 🙂, a paragraph", "plain words", None, ""]
    column = pa.array(texts, pa.string()).cast(PARQUET_TYPES[name])
    pq.write_table(pa.table({"id": pa.array(range(4), pa.int64()), "text": column}), data / "p.parquet")
    spec = flat_spec(
        model="tiny", source=str(data), results=sqlite_url, results_table="scores", only_new=True
    )
    _, first = pipeline.run(spec, "first")
    _, second = pipeline.run(spec, "second")
    assert (first.rows_in, first.rows_out, first.rows_failed) == (4, 2, 2)
    assert (second.rows_in, second.rows_out) == (0, 0)


PG_KEYS = ["bigint", "smallint", "text", "varchar(10)", "char(6)", "citext"]


@pytest.mark.postgres
@pytest.mark.parametrize("key_type", PG_KEYS)
def test_only_new_twice_scores_nothing_the_second_time_whatever_the_key_type(
    pg_url: str, key_type: str, pipeline: Any
) -> None:
    """The anti-join matches the key as stored: a char(n) key is read, and stored, padded."""
    with writer(pg_url) as eng, eng.begin() as conn:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS citext"))
        conn.execute(sa.text(f"CREATE TABLE docs (id {key_type} PRIMARY KEY, body text)"))
        conn.execute(sa.text("INSERT INTO docs VALUES ('1', 'a first paragraph'), ('22', 'and a second')"))
    first, second = _twice(pg_url, pipeline)
    assert (first.rows_out, second.rows_in) == (2, 0)
