"""PostgreSQL: every shard reads the plan's snapshot, and a lost snapshot is reported, never silent."""

from __future__ import annotations

import dataclasses
import logging
import re

import pytest
import sqlalchemy as sa
from sql_tables import create_docs, insert, read_all, writer

from shardwise.errors import ConfigError, SourceError
from shardwise.sources.base import SourcePlan
from shardwise.sources.sql.source import SqlSource

pytestmark = pytest.mark.postgres

ORIGINAL = [(k * 10, f"v{k}") for k in range(1, 101)]
SNAPSHOT = re.compile(r"^[0-9A-F]+-[0-9A-F]+-[0-9]+\|\d+:\d+:[\d,]*$")


def _change(eng: sa.Engine) -> None:
    """Commit new rows below, inside and above the planned range, an update and a delete."""
    insert(eng, [(5, "below"), (55, "inside"), (5000, "above")])
    with eng.begin() as conn:
        conn.execute(sa.text("UPDATE docs SET text = 'changed' WHERE id = 200"))
        conn.execute(sa.text("DELETE FROM docs WHERE id = 300"))


def test_reads_see_the_planned_snapshot_until_close(pg_url: str) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ORIGINAL)
        src = SqlSource(pg_url, "docs", "id", "text")
        try:
            plan = src.plan(shards=4)
            assert plan.snapshot is not None and SNAPSHOT.match(plan.snapshot)
            _change(eng)
            assert read_all(src, plan) == ORIGINAL
            with src.open_reader(plan, plan.shards[1]) as reader:
                assert reader.snapshot == plan.snapshot and not reader.snapshot_lost
            src.close()
            after = src.plan(shards=4)
            rows = dict(read_all(src, after))
        finally:
            src.close()
    assert after.snapshot != plan.snapshot
    assert rows[5] == "below" and rows[55] == "inside" and rows[5000] == "above"
    assert rows[200] == "changed" and 300 not in rows


def test_another_source_imports_a_held_snapshot(pg_url: str) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ORIGINAL)
        with SqlSource(pg_url, "docs", "id", "text") as planner:
            plan = planner.plan(shards=3)
            _change(eng)
            with SqlSource(pg_url, "docs", "id", "text") as reader_source:
                stored = SourcePlan.from_json(plan.to_json())
                assert read_all(reader_source, stored) == ORIGINAL


def test_lost_snapshot_is_reported(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ORIGINAL)
        with SqlSource(pg_url, "docs", "id", "text") as planner:
            stored = planner.plan(shards=2).to_json()
        _change(eng)  # a resumed run: the planning transaction has ended
    plan = SourcePlan.from_json(stored)
    with SqlSource(pg_url, "docs", "id", "text") as src, caplog.at_level(logging.WARNING):
        with src.open_reader(plan, plan.shards[0]) as reader:
            keys = [row.key for row in reader.rows]
        assert reader.snapshot_lost and reader.snapshot != plan.snapshot
        assert reader.snapshot is not None and re.match(r"^\d+:\d+:", reader.snapshot)
        assert 55 in keys  # read at a fresh snapshot, and said so
    assert "is gone" in caplog.text and "fresh snapshot" in caplog.text


def test_lost_snapshot_can_be_refused(pg_url: str) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ORIGINAL)
    with SqlSource(pg_url, "docs", "id", "text") as planner:
        plan = planner.plan(shards=2)
    strict = SqlSource(pg_url, "docs", "id", "text", on_lost_snapshot="error")
    with strict, pytest.raises(SourceError, match=r"snapshot .* is gone .* plan again"):
        list(strict.read(plan, plan.shards[0]))


@pytest.mark.parametrize("forged", ["x'; DROP TABLE docs; --|1:1:", "00000003-0000001B-1' OR '1|1:1:"])
def test_forged_snapshot_ids_never_reach_sql(pg_url: str, forged: str) -> None:
    with writer(pg_url) as eng:
        create_docs(eng, ORIGINAL)
        with SqlSource(pg_url, "docs", "id", "text") as src:
            plan = dataclasses.replace(src.plan(shards=1), snapshot=forged)
            with pytest.raises(ConfigError, match="pg_export_snapshot"):
                list(src.read(plan, plan.shards[0]))
        with eng.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM docs")).scalar_one() == 100
