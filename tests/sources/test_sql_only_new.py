"""--only-new on SQL sources: an anti-join on the results table, by model version and input fingerprint."""

from __future__ import annotations

import pytest
import sql_tables
import sqlalchemy as sa
from sql_tables import create_docs, insert, read_all, writer

from shardwise.errors import SourceError
from shardwise.lineage import value_fingerprint
from shardwise.sources.base import NewOnly
from shardwise.sources.sql.source import SqlSource

TEXTS = {k: f"row {k}" for k in range(1, 21)} | {2: "héllo ✓ 🙂"}  # non-ASCII: UTF-8 MD5 in SQL
M1 = NewOnly("m1", "results")

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


def _results(eng: sa.Engine, rows: list[tuple[int, str, str]]) -> None:
    key_type = "BIGINT" if eng.dialect.name == "postgresql" else "INTEGER"
    with eng.begin() as conn:
        conn.execute(
            sa.text(
                f"CREATE TABLE results (source_key {key_type} NOT NULL, model_version TEXT NOT NULL, "
                "input_fingerprint TEXT NOT NULL, score REAL, PRIMARY KEY (source_key, model_version))"
            )
        )
        conn.execute(
            sa.text("INSERT INTO results (source_key, model_version, input_fingerprint) VALUES (:k, :m, :f)"),
            [{"k": k, "m": m, "f": f} for k, m, f in rows],
        )


def test_only_new_rows_are_planned_and_read(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [*TEXTS.items(), (26, None)])
        scored = [(k, "m1", value_fingerprint(TEXTS[k])) for k in range(1, 11)]
        _results(
            eng, [*scored, (11, "m0", value_fingerprint(TEXTS[11])), (12, "m1", "0" * 32), (26, "m1", "")]
        )
        insert(eng, [(k, f"new {k}") for k in range(21, 26)])
        with eng.begin() as conn:
            conn.execute(sa.text("UPDATE docs SET text = 'row 3, edited' WHERE id = 3"))
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(shards=3, new_only=M1)
        rows = read_all(src, plan)
        everything = src.plan(shards=3)
    # Changed (3), other model version (11), stale fingerprint (12), unscored, new, and NULL text (26).
    assert [k for k, _ in rows] == [3, *range(11, 27)]
    assert plan.params["skipped_rows"] == 9 and plan.params["rows"] == 17 == plan.expected_rows
    assert plan.params["new_only"] == {
        "model_version": "m1",
        "results_table": "results",
        "results_table_found": True,
    }
    assert everything.expected_rows == 26 and everything.params["skipped_rows"] == 0


def test_everything_is_new_without_a_results_table(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, list(TEXTS.items()))
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(shards=2, new_only=M1)
        assert len(read_all(src, plan)) == 20
    assert plan.params["skipped_rows"] == 0 and plan.params["new_only"]["results_table_found"] is False


def test_nothing_new_plans_zero_shards(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, list(TEXTS.items()))
        _results(eng, [(k, "m1", value_fingerprint(t)) for k, t in TEXTS.items()])
    with SqlSource(any_url, "docs", "id", "text") as src:
        plan = src.plan(new_only=M1)
    assert plan.shards == () and plan.params["skipped_rows"] == 20


def test_results_table_missing_a_column_is_a_source_error(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, list(TEXTS.items()))
        with eng.begin() as conn:
            conn.execute(sa.text("CREATE TABLE results (source_key INTEGER, model_version TEXT)"))
    src = SqlSource(any_url, "docs", "id", "text")
    with (
        src,
        pytest.raises(
            SourceError, match=r"lacks column.* input_fingerprint .*are: source_key, model_version"
        ),
    ):
        src.plan(new_only=M1)
