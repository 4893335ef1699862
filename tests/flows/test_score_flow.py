"""The score flow end to end on Prefect's test harness: SQLite, PostgreSQL and Parquet on moto S3."""

from __future__ import annotations

import importlib
import logging

import pytest
from flow_data import BAD_ROWS, LINEAGE, execute, make_docs, parquet_bytes, texts

from shardwise.errors import TransientError
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline.run_result import RunResult

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _run(
    source: str, table: str | None = None, results: str | None = None, **run: object
) -> tuple[bool, RunResult]:
    """Score ``source`` (its ``table``) into ``results`` with the tiny model; ``run`` is the run section."""
    params = {
        "source": {"location": source, "table": table},
        "model": {"name": "tiny"},
        "results": {"location": results},
        "run": run,
    }
    state = score(ScoreParams.model_validate(params), return_state=True)
    return state.is_completed(), state.result(raise_on_failure=False)


def _results(url: str, table: str = "shardwise_results") -> list[tuple]:
    return execute(url, f"select * from {table} order by source_key")


def test_sqlite_end_to_end_with_dead_letters_and_lineage(sqlite_url: str) -> None:
    make_docs(sqlite_url, 300)
    ok, summary = _run(source=sqlite_url, table="docs", shards=3)
    assert ok, summary
    assert (summary.totals.rows_out, summary.totals.rows_failed, summary.totals.shards_done) == (
        300,
        len(BAD_ROWS),
        3,
    )
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(300,)]
    nulls = " or ".join(f"{c} is null" for c in LINEAGE)
    assert execute(sqlite_url, f"select count(*) from shardwise_results where {nulls}") == [(0,)]
    errors = execute(
        sqlite_url, "select source_key, error_class, run_id from shardwise_errors order by source_key"
    )
    assert sorted(int(k) for k, _, _ in errors) == sorted(k for k, _ in BAD_ROWS)
    assert {c for _, c, _ in errors} == {"InputError"} and {r for _, _, r in errors} == {summary.run_id}
    run = execute(sqlite_url, "select status, started_by, code_version, model_version from shardwise_runs")
    assert run == [("completed", "cli", run[0][2], summary.model_version)]
    assert run[0][2].startswith("shardwise ")


class _Warnings(logging.Handler):
    """The warnings Prefect's loggers emit meanwhile."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def test_the_summary_states_results_dead_letters_and_skipped_rows_adding_up(sqlite_url: str) -> None:
    """Rows with a NULL key cannot be dead letters (no key to redrive by): counted as skipped, and said."""
    make_docs(sqlite_url, 40, table="keyed")
    execute(sqlite_url, "create table docs (id bigint, text text)")
    execute(sqlite_url, "insert into docs select id, text from keyed")
    execute(sqlite_url, "insert into docs values (null, 'no key'), (null, null)")
    warnings = _Warnings()
    logging.getLogger("prefect").addHandler(warnings)
    try:
        ok, summary = _run(source=sqlite_url, table="docs", shards=2)
    finally:
        logging.getLogger("prefect").removeHandler(warnings)
    assert ok, summary
    assert any("2 rows have NULL in key column 'id', so they are skipped" in w for w in warnings.seen), (
        warnings
    )
    assert (summary.totals.rows_out, summary.totals.rows_failed, summary.skipped.total) == (
        40,
        len(BAD_ROWS),
        2,
    )
    assert summary.skipped.as_dict() == {
        "null_key": 2,
        "already_scored": 0,
        "already_read": 0,
        "unparsable": 0,
    }
    inputs = execute(sqlite_url, "select count(*) from docs")[0][0]
    assert summary.totals.rows_out + summary.totals.rows_failed + summary.skipped.total == inputs
    ok, again = _run(source=sqlite_url, table="docs", shards=2, only_new=True)
    assert ok and again.skipped.as_dict() == {
        "null_key": 2,
        "already_scored": 40,
        "already_read": 0,
        "unparsable": 0,
    }
    assert again.totals.rows_out + again.totals.rows_failed + again.skipped.total == inputs


def test_repeating_a_run_adds_and_changes_nothing(sqlite_url: str) -> None:
    make_docs(sqlite_url, 200, bad=False)
    assert _run(source=sqlite_url, table="docs", shards=2)[0]
    before = _results(sqlite_url)
    ok, summary = _run(source=sqlite_url, table="docs", shards=2)
    assert ok and (summary.merge.inserted, summary.merge.updated, summary.merge.unchanged) == (0, 0, 200)
    assert _results(sqlite_url) == before


@pytest.mark.postgres
def test_postgres_only_new_scores_inserted_and_updated_rows_only(pg_url: str) -> None:
    make_docs(pg_url, 1000, bad=False)
    ok, first = _run(source=pg_url, table="docs", shards=4)
    assert ok and first.totals.rows_out == 1000
    new = texts(1030, seed=7)[1000:]
    execute(
        pg_url,
        "insert into docs (id, text) values (:id, :text)",
        [{"id": 5000 + i, "text": t} for i, t in enumerate(new)],
    )
    execute(pg_url, "update docs set text = text || ' (edited)' where id < 5")
    ok, second = _run(source=pg_url, table="docs", shards=4, only_new=True)
    assert ok, second
    assert (second.totals.rows_in, second.merge.inserted, second.merge.updated) == (35, 30, 5)
    assert execute(pg_url, "select count(*) from shardwise_results") == [(1030,)]
    rescored = execute(
        pg_url, "select count(*) from shardwise_results where run_id = :r", {"r": second.run_id}
    )
    assert rescored == [(35,)]
    ok, third = _run(source=pg_url, table="docs", shards=4, only_new=True)
    assert ok and third.totals.rows_in == 0 and third.shards.planned == 0


@pytest.mark.s3
def test_parquet_on_s3_end_to_end_and_only_new_objects(s3_env, sqlite_url: str) -> None:
    s3 = s3_env.client()
    s3.create_bucket(Bucket="landing")
    body = texts(250)
    s3.put_object(Bucket="landing", Key="docs/a.parquet", Body=parquet_bytes(list(range(150)), body[:150]))
    s3.put_object(
        Bucket="landing", Key="docs/b.parquet", Body=parquet_bytes(list(range(150, 250)), body[150:])
    )
    common = {"source": "s3://landing/docs/", "results": sqlite_url, "rows_per_shard": 100}
    ok, first = _run(**common)
    assert ok and first.totals.rows_out == 250
    ok, again = _run(only_new=True, **common)
    assert ok and again.totals.rows_in == 0
    s3.put_object(Bucket="landing", Key="docs/c.parquet", Body=parquet_bytes([900, 901], ["new one", None]))
    ok, fresh = _run(only_new=True, **common)
    assert ok and (fresh.totals.rows_out, fresh.totals.rows_failed) == (1, 1)
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(251,)]


def test_permanent_shard_error_fails_the_run_fast_and_resume_finishes_it(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    infer = importlib.import_module("shardwise.pipeline.worker")

    make_docs(sqlite_url, 300, bad=False)
    real = infer.score_shard

    def broken(**kwargs):  # type: ignore[no-untyped-def]
        if kwargs["shard"].shard_id == 1:  # the attempt starts, then scoring breaks
            kwargs["store"].ledger.record_attempt(kwargs["run"].run_id, 1)
            raise ValueError("model output had the wrong shape")
        return real(**kwargs)

    monkeypatch.setattr(infer, "score_shard", broken)
    ok, summary = _run(source=sqlite_url, table="docs", shards=3)
    assert not ok
    assert (summary.totals.shards_done, summary.totals.shards_failed) == (2, 1)
    shard = execute(
        sqlite_url, "select status, attempts, last_error from shardwise_shards where shard_id = 1"
    )
    assert shard[0][:2] == ("failed", 1), "a permanent error is not retried"
    assert "wrong shape" in shard[0][2]
    moves = "select from_status, to_status from shardwise_shard_transitions where shard_id = 1 order by id"
    assert execute(sqlite_url, moves) == [("pending", "running"), ("running", "failed")]

    monkeypatch.setattr(infer, "score_shard", real)
    ok, resumed = _run(source=sqlite_url, table="docs", shards=3, resume=summary.run_id)
    assert ok and resumed.run_id == summary.run_id
    assert (resumed.shards.skipped, resumed.totals.shards_done, resumed.totals.rows_out) == (2, 3, 300)
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(300,)]


def test_transient_error_is_retried(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shard = importlib.import_module("shardwise.pipeline.shard")

    make_docs(sqlite_url, 100, bad=False)
    real, calls = shard.Engine, []

    def flaky(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(len(calls) + 1)
        if len(calls) == 1:
            raise TransientError("connection reset by peer (simulated)")
        return real(*args, **kwargs)

    monkeypatch.setattr(shard, "Engine", flaky)
    ok, summary = _run(source=sqlite_url, table="docs", shards=1)
    assert ok and summary.totals.rows_out == 100
    assert calls == [1, 2]
    assert execute(sqlite_url, "select status, attempts from shardwise_shards") == [("done", 2)]
    moves = "select from_status, to_status, attempt, error from shardwise_shard_transitions order by id"
    assert execute(sqlite_url, moves) == [
        ("pending", "running", 1, None),
        ("running", "retrying", 1, "TransientError: connection reset by peer (simulated)"),  # not failed
        ("retrying", "running", 2, None),
        ("running", "done", 2, None),
    ]
    assert summary.shards.states == {"done": 1, "retried": 1}


def test_local_parquet_folder_end_to_end(tmp_path, sqlite_url: str) -> None:
    folder = tmp_path / "landing"
    folder.mkdir()
    body = texts(180)
    (folder / "part-0.parquet").write_bytes(parquet_bytes(list(range(100)), body[:100], row_group_size=50))
    (folder / "part-1.parquet").write_bytes(
        parquet_bytes(list(range(100, 180)), [*body[100:179], None], row_group_size=40)
    )
    (folder / "_SUCCESS").write_text("")
    ok, summary = _run(source=str(folder), results=sqlite_url, shards=3)
    assert ok and (summary.totals.rows_out, summary.totals.rows_failed, summary.shards.planned) == (179, 1, 3)
    assert execute(sqlite_url, "select count(distinct shard_id) from shardwise_results") == [(3,)]
