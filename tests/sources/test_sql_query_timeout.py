"""The query timeout of a SQL source (issue 24): a runaway ``--where`` stops at the limit on PostgreSQL
(``statement_timeout``) and on SQLite (an interrupt), failing the planning or the shard with one line that
names the limit and how to raise it; the reader's own time between rows never counts."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest
import sql_tables
import sqlalchemy as sa
from sql_tables import create_docs, writer

from shardwise.errors import ConfigError, SourceError
from shardwise.sources.base import Key, SourceRow
from shardwise.sources.sql.source import SqlSource
from shardwise.sources.sql.timeout import DEFAULT_QUERY_TIMEOUT_S

any_url = sql_tables.any_url

LIGHT, HEAVY = "x", "x" * 3000
ROWS = 600
LIMIT_S = 0.3


def _costly(url: str) -> str:
    """A filter that passes the checks, cheap on LIGHT rows and slow on HEAVY ones (30 MB or 9 MB a row)."""
    if url.startswith("postgresql"):
        return "length(lpad(text, length(text) * 10000)) > 0"
    return "length(replace(text, 'x', text)) > 0"


def _docs(url: str, text: str) -> None:
    with writer(url) as eng:
        create_docs(eng, [(k, text) for k in range(ROWS)])


def _stopped(message: str, doing: str) -> None:
    assert message.startswith(doing), message
    assert f"was stopped by the query timeout: a query ran past {LIMIT_S:g} s (--query-timeout)" in message
    assert "raise --query-timeout SECONDS (0: no limit)" in message, message


def test_planning_a_runaway_filter_stops_at_the_limit(any_url: str) -> None:
    _docs(any_url, HEAVY)
    started = time.monotonic()
    with (
        SqlSource(any_url, "docs", "id", "text", _costly(any_url), query_timeout_s=LIMIT_S) as src,
        pytest.raises(SourceError) as info,
    ):
        src.plan(shards=2)
    assert time.monotonic() - started < 8, "the query ran on past its limit"
    _stopped(str(info.value), "planning ")


def test_a_shard_read_stops_at_the_limit_and_the_plan_records_it(any_url: str) -> None:
    _docs(any_url, LIGHT)
    where = _costly(any_url)
    with SqlSource(any_url, "docs", "id", "text", where, query_timeout_s=LIMIT_S) as src:
        plan = src.plan(shards=2)  # cheap while the rows are light
    assert plan.param("query_timeout_s") == LIMIT_S
    with writer(any_url) as eng, eng.begin() as conn:
        conn.execute(sa.text("UPDATE docs SET text = :t"), {"t": HEAVY})
    # The planning source is closed, so on PostgreSQL the shard reads at a fresh snapshot: the heavy rows.
    with SqlSource(any_url, "docs", "id", "text", where, query_timeout_s=LIMIT_S) as src:
        started = time.monotonic()
        with pytest.raises(SourceError) as info:
            list(src.read(plan, plan.shards[0]))
    assert time.monotonic() - started < 8, "the query ran on past its limit"
    _stopped(str(info.value), "reading shard 0 of ")


def test_the_readers_own_time_between_rows_never_counts(any_url: str) -> None:
    """Scoring between fetches takes past the limit several times over; the queries themselves are quick.

    Fetches of 500 rows run thousands of SQLite steps each, so its clock is looked at inside every one.
    """
    with writer(any_url) as eng:
        create_docs(eng, [(k, f"row {k}") for k in range(2000)])

    def slowly(rows: Iterable[SourceRow]) -> list[Key]:
        keys = []
        for row in rows:
            if row.key % 500 == 499:
                time.sleep(LIMIT_S * 1.5)  # scoring a batch: none of it in the database
            keys.append(row.key)
        return keys

    with SqlSource(any_url, "docs", "id", "text", query_timeout_s=LIMIT_S, fetch_rows=500) as src:
        plan = src.plan(shards=1)
        assert slowly(src.read(plan, plan.shards[0])) == list(range(2000))
        assert slowly(src.read_keys(list(range(2000)))) == list(range(2000))


def test_no_limit_and_the_default() -> None:
    assert DEFAULT_QUERY_TIMEOUT_S == 300
    with pytest.raises(ConfigError, match=r"query timeout must be a number of seconds >= 0 \(0: no limit\)"):
        SqlSource("sqlite:///unused.db", "docs", "id", query_timeout_s=-1)


def test_zero_sets_no_limit(any_url: str) -> None:
    _docs(any_url, LIGHT)
    with SqlSource(any_url, "docs", "id", "text", _costly(any_url), query_timeout_s=0) as src:
        plan = src.plan(shards=2)
        assert plan.param("query_timeout_s") == 0 and plan.expected_rows == ROWS
