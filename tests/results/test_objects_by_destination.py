"""Seen Parquet objects are keyed by source and destination; a ledger made before that is upgraded."""

from __future__ import annotations

import sqlalchemy as sa
from results_helpers import make_plan, make_run

from shardwise.results import Ledger, ledger_sql
from shardwise.results.codec import bind_timestamp, utc_now
from shardwise.results.sqlfiles import load_script

SOURCE = "s3://bucket/docs"
A, B = "scores", "delta:/lake/results/scores"

_OLD_OBJECTS = """CREATE TABLE shardwise_objects (
    source_identity text NOT NULL, object_key text NOT NULL, etag text NOT NULL, run_id text NOT NULL,
    seen_at {timestamp} NOT NULL, PRIMARY KEY (source_identity, object_key, etag))"""


def _ledger_before_destinations(url: str) -> None:
    """The ledger as the release before destinations made it: seen objects keyed by source alone (one
    row per pair, whichever run recorded it first), with pairs recorded by a run into A, a run into B,
    and a run whose record is gone."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        for stmt in load_script(conn.dialect.name, "ledger_schema"):
            conn.exec_driver_sql(stmt)
        conn.exec_driver_sql("DROP TABLE shardwise_objects")
        timestamp = "timestamptz" if conn.dialect.name == "postgresql" else "text"
        conn.exec_driver_sql(_OLD_OBJECTS.format(timestamp=timestamp))
        now = utc_now()
        for run_id, table in (("run-a", A), ("run-b", B)):
            ledger_sql.start_run(conn, make_run(run_id, table=table), make_plan(), now)
        rows = [("run-a", "1.parquet", "e1"), ("run-a", "2.parquet", "e2"), ("run-b", "4.parquet", "e4")]
        rows.append(("run-gone", "3.parquet", "e3"))
        conn.execute(
            sa.text(
                "INSERT INTO shardwise_objects (source_identity, object_key, etag, run_id, seen_at) "
                "VALUES (:s, :k, :e, :r, :t)"
            ),
            [{"s": SOURCE, "k": k, "e": e, "r": r, "t": bind_timestamp(conn, now)} for r, k, e in rows],
        )
    engine.dispose()


def test_an_older_ledger_files_each_seen_object_under_its_runs_destination(db_url: str) -> None:
    _ledger_before_destinations(db_url)
    with Ledger(db_url) as ledger:
        # Read before any upgrade (a dry run, a watcher): each pair under the results of its run.
        assert ledger.seen_objects(SOURCE, A) == {("1.parquet", "e1"), ("2.parquet", "e2")}
        assert ledger.seen_objects(SOURCE, B) == {("4.parquet", "e4")}
        assert ledger.seen_objects(SOURCE, None) == frozenset()
        ledger.ensure()
        ledger.ensure()  # idempotent
        with ledger.reading("inspect") as conn:
            columns = {c["name"] for c in sa.inspect(conn).get_columns("shardwise_objects")}
            assert "destination" in columns
            assert not sa.inspect(conn).has_table("shardwise_objects_before_destination")
            key = sa.inspect(conn).get_pk_constraint("shardwise_objects")["constrained_columns"]
            assert key == ["source_identity", "destination", "object_key", "etag"]
            stored = conn.execute(sa.text("SELECT run_id, destination FROM shardwise_objects")).all()
        assert sorted(set(stored)) == [("run-a", A), ("run-b", B), ("run-gone", "")]
        assert ledger.seen_objects(SOURCE, A) == {("1.parquet", "e1"), ("2.parquet", "e2")}
        assert ledger.seen_objects(SOURCE, B) == {("4.parquet", "e4")}
        # The run whose record is gone scored 3.parquet into a destination no one knows: scored again once.
        assert ("3.parquet", "e3") not in ledger.seen_objects(SOURCE, A) | ledger.seen_objects(SOURCE, B)
        ledger.record_objects("run-b", SOURCE, [("1.parquet", "e1")])  # the same pair, another destination
        assert ledger.seen_objects(SOURCE, B) == {("1.parquet", "e1"), ("4.parquet", "e4")}
        assert ledger.seen_objects(SOURCE, None) == {("1.parquet", "e1")}
