"""A binary text column (bytea, BLOB): scored as its UTF-8 text, and skipped by --only-new when unchanged."""

from __future__ import annotations

from typing import Any

import pytest
import sql_tables
import sqlalchemy as sa
from spec_builder import flat_spec
from sql_tables import writer

from shardwise.errors import InputError
from shardwise.lineage import value_fingerprint
from shardwise.model.text import coerce_text
from shardwise.sources.base import NewOnly
from shardwise.sources.sql.source import SqlSource

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests

BODIES: dict[int, bytes | None] = {
    1: b"a plain ascii paragraph about shards",
    2: "héllo ✓ 🙂, non-ASCII text stored as UTF-8 bytes".encode(),
    3: b"\xff\xfe not UTF-8 at all",
    4: None,
    5: b"another paragraph, long enough to score",
}
SCORABLE = [1, 2, 5]  # valid UTF-8; 3 and 4 are dead letters


def _make(url: str, column_type: str = "") -> None:
    pg = url.startswith("postgresql")
    column_type = column_type or ("BYTEA" if pg else "BLOB")
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE docs (id BIGINT PRIMARY KEY, body {column_type})"))
        conn.execute(
            sa.text("INSERT INTO docs (id, body) VALUES (:id, :body)"),
            [{"id": k, "body": v} for k, v in BODIES.items()],
        )


def _results(url: str, rows: list[tuple[int, str | None]]) -> None:
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(
            sa.text(
                "CREATE TABLE results (source_key BIGINT NOT NULL, model_version TEXT NOT NULL, "
                "input_fingerprint TEXT NOT NULL, PRIMARY KEY (source_key, model_version))"
            )
        )
        conn.execute(
            sa.text("INSERT INTO results VALUES (:k, 'm1', :f)"), [{"k": k, "f": f} for k, f in rows]
        )


def _update(url: str, key: int, body: bytes) -> None:
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text("UPDATE docs SET body = :b WHERE id = :k"), {"b": body, "k": key})


def _new_keys(url: str) -> list[Any]:
    with SqlSource(url, "docs", "id", "body") as src:
        plan = src.plan(new_only=NewOnly("m1", "results"))
        return [row.key for shard in plan.shards for row in src.read(plan, shard)]


def _check_fingerprints(url: str) -> None:
    with SqlSource(url, "docs", "id", "body") as src:
        plan = src.plan()
        values = {row.key: row.value for shard in plan.shards for row in src.read(plan, shard)}
    assert values == BODIES  # read as stored: bytes, decoded only when scored
    assert coerce_text(values[2]) == BODIES[2].decode()  # type: ignore[union-attr]
    with pytest.raises(InputError, match="not valid UTF-8"):
        coerce_text(values[3])
    # What the pipeline stores for each scored row (shardwise/pipeline/shard.py).
    _results(url, [(k, value_fingerprint(values[k])) for k in SCORABLE])
    assert _new_keys(url) == [3, 4]  # the dead letters stay new
    _update(url, 5, b"an edited paragraph")
    assert _new_keys(url) == [3, 4, 5]


def test_the_database_fingerprints_bytes_as_the_pipeline_does(any_url: str) -> None:
    _make(any_url)
    _check_fingerprints(any_url)


def test_a_sqlite_text_column_holding_blobs_is_fingerprinted_the_same(sqlite_url: str) -> None:
    _make(sqlite_url, "TEXT")  # SQLite keeps bytes as a BLOB whatever the column's declared type
    _check_fingerprints(sqlite_url)


def test_only_new_runs_skip_unchanged_binary_rows(any_url: str, pipeline) -> None:  # type: ignore[no-untyped-def]
    """End to end with the tiny model: the second run scores only what changed, and the dead letters."""
    _make(any_url)
    spec = flat_spec(model="tiny",
        source=any_url, results=any_url, results_table="scores", table="docs", text_column="body",
        only_new=True,
    )  # fmt: skip
    _, first = pipeline.run(spec, "first")
    assert (first.rows_in, first.rows_out, first.rows_failed) == (5, 3, 2)
    _, second = pipeline.run(spec, "second")
    assert (second.rows_in, second.rows_out, second.rows_failed) == (2, 0, 2)
    _update(any_url, 2, "héllo again ✓".encode())
    _, third = pipeline.run(spec, "third")
    assert (third.rows_in, third.rows_out, third.rows_failed) == (3, 1, 2)
