"""Seen Parquet objects are keyed by source and destination: one destination's objects are new to another."""

from __future__ import annotations

import sqlalchemy as sa
from results_helpers import make_plan, make_run

from shardwise.results import Ledger

SOURCE = "s3://bucket/docs"
A, B = "scores", "delta:/lake/results/scores"


def test_each_seen_object_is_filed_under_its_runs_destination(db_url: str) -> None:
    with Ledger(db_url) as ledger:
        assert ledger.seen_objects(SOURCE, A) == frozenset(), "no ledger yet: nothing was seen"
        ledger.ensure()
        for run_id, table in (("run-a", A), ("run-b", B)):
            ledger.start_run(make_run(run_id, table=table), make_plan())
        ledger.record_objects("run-a", SOURCE, [("1.parquet", "e1"), ("2.parquet", "e2")])
        ledger.record_objects("run-b", SOURCE, [("4.parquet", "e4")])
        ledger.record_objects("run-a", SOURCE, [("1.parquet", "e1")])  # known: kept as it was
        assert ledger.seen_objects(SOURCE, A) == {("1.parquet", "e1"), ("2.parquet", "e2")}
        assert ledger.seen_objects(SOURCE, B) == {("4.parquet", "e4")}
        assert ledger.seen_objects(SOURCE, None) == frozenset()
        assert ledger.seen_objects("s3://bucket/other", A) == frozenset()
        ledger.record_objects("run-b", SOURCE, [("1.parquet", "e1")])  # the same pair, another destination
        assert ledger.seen_objects(SOURCE, B) == {("1.parquet", "e1"), ("4.parquet", "e4")}
        assert ledger.seen_objects(SOURCE, None) == {("1.parquet", "e1")}
        with ledger.reading("inspect") as conn:
            key = sa.inspect(conn).get_pk_constraint("shardwise_objects")["constrained_columns"]
        assert key == ["source_identity", "destination", "object_key", "etag"]
