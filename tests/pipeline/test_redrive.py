"""Re-drive dead letters end to end: prepare_run + score_shard + finish_run, without an orchestrator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flow_data import execute
from spec_builder import flat_spec, respec

from shardwise.errors import ConfigError
from shardwise.pipeline import RunSpec
from shardwise.results import RunCounts
from shardwise.sources import SourcePlan

GOOD = [(k, f"paragraph {k} about shards, batches and the merge that happens once") for k in range(12)]
BAD: list[tuple[int, Any]] = [(100, None), (101, ""), (102, "  \t "), (103, None)]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest) -> str:
    """A database holding ``docs`` (12 good rows, 4 bad ones); results go to the same database."""
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    execute(url, "CREATE TABLE docs (id BIGINT PRIMARY KEY, text TEXT)")
    rows = [{"id": k, "text": t} for k, t in GOOD + BAD]
    execute(url, "INSERT INTO docs (id, text) VALUES (:id, :text)", rows)
    return url


@pytest.fixture
def run(pipeline):  # type: ignore[no-untyped-def]
    """One whole run, every shard scored once; returns its plan and counts."""

    def run(spec: RunSpec, run_id: str) -> tuple[SourcePlan, RunCounts]:
        planned, counts = pipeline.run(spec, run_id)
        return planned.plan, counts

    return run


def dead_keys(url: str, run_id: str) -> list[str]:
    rows = execute(url, "SELECT source_key FROM shardwise_errors WHERE run_id = :r", {"r": run_id})
    return sorted(str(k) for (k,) in rows)


def sql_spec(url: str, **kwargs: Any) -> RunSpec:
    settings: dict[str, Any] = {
        "results_table": "scores",
        "table": "docs",
        "shards": 2,
        "model": "tiny",
        **kwargs,
    }
    return flat_spec(source=url, results=url, **settings)


def count(url: str, sql: str) -> int:
    return int(execute(url, sql)[0][0])


def test_redrive_scores_only_the_rows_fixed_since_they_failed(url: str, run) -> None:
    plan, counts = run(sql_spec(url), "first")
    assert counts.rows_out == 12 and counts.rows_failed == 4
    assert dead_keys(url, "first") == ["100", "101", "102", "103"]

    plan, counts = run(sql_spec(url, redrive="first"), "nothing-changed")
    assert plan.shards == () and plan.snapshot is None
    assert plan.params["unchanged"] == 4 and plan.params["dead_letters"] == 4
    status = execute(url, "SELECT status FROM shardwise_runs WHERE run_id = 'nothing-changed'")
    assert status == [("completed",)] and counts.rows_in == 0

    execute(url, "UPDATE docs SET text = 'now a real sentence ' || CAST(id AS TEXT) WHERE id IN (100, 101)")
    plan, counts = run(sql_spec(url, redrive="first"), "fixed")
    assert [k for s in plan.shards for k in s.bounds["keys"]] == [100, 101]
    assert plan.params["redrive_of"] == "first" and plan.params["unchanged"] == 2
    assert counts.rows_in == 2 and counts.rows_out == 2 and counts.rows_failed == 0
    assert count(url, "SELECT count(*) FROM scores") == 14
    assert count(url, "SELECT count(*) FROM scores WHERE run_id = 'fixed'") == 2
    assert dead_keys(url, "first") == ["100", "101", "102", "103"], "the old run's history stays"
    assert dead_keys(url, "fixed") == []


def test_force_rescores_every_key_and_still_bad_rows_fail_again(url: str, run) -> None:
    run(sql_spec(url), "first")
    execute(url, "UPDATE docs SET text = 'a repaired row' WHERE id = 100")
    execute(url, "DELETE FROM docs WHERE id = 103")
    plan, counts = run(sql_spec(url, redrive="first", force=True), "forced")
    assert [k for s in plan.shards for k in s.bounds["keys"]] == [100, 101, 102]
    assert plan.params["missing"] == 1 and plan.params["force"] is True
    assert counts.rows_in == 3 and counts.rows_out == 1 and counts.rows_failed == 2
    assert dead_keys(url, "forced") == ["101", "102"]
    assert count(url, "SELECT count(*) FROM scores") == 13


def test_an_interrupted_redrive_resumes_its_stored_keys(url: str, run, pipeline) -> None:
    run(sql_spec(url), "first")
    execute(url, "UPDATE docs SET text = 'mended ' || CAST(id AS TEXT) WHERE id IN (100, 102)")
    spec = sql_spec(url, redrive="first", shards=None, rows_per_shard=1)
    prepared = pipeline.plan(spec, "cut-short")
    try:
        pipeline.shard(prepared, prepared.todo[0])
    finally:
        prepared.close()
    execute(url, "UPDATE docs SET text = 'changed again' WHERE id = 101")  # not in the stored plan
    plan, counts = run(sql_spec(url, resume="cut-short"), "ignored")
    assert [k for s in plan.shards for k in s.bounds["keys"]] == [100, 102]
    assert counts.rows_out == 2 and count(url, "SELECT count(*) FROM scores") == 14


def test_a_changed_but_still_bad_row_is_dead_lettered_again(url: str, run) -> None:
    run(sql_spec(url), "first")
    execute(url, "UPDATE docs SET text = '   ' WHERE id = 101")
    _, counts = run(sql_spec(url, redrive="first"), "again")
    assert counts.rows_in == 1 and counts.rows_failed == 1
    assert dead_keys(url, "again") == ["101"]


def test_unknown_run_and_bad_specs_are_refused(url: str, run) -> None:
    with pytest.raises(ConfigError, match=r"run 'nope' is not in the shardwise_runs table"):
        run(sql_spec(url, redrive="nope"), "r")  # no ledger yet
    run(sql_spec(url), "first")
    with pytest.raises(ConfigError, match=r"run 'nope' is not in the shardwise_runs table"):
        run(sql_spec(url, redrive="nope"), "r")
    with pytest.raises(ConfigError, match="is a new run"):
        run(sql_spec(url, redrive="first"), "first")
    execute(url, "UPDATE docs SET text = 'fine' WHERE id IN (100, 101, 102, 103)")
    run(sql_spec(url, redrive="first", force=True), "clean")
    with pytest.raises(ConfigError, match=r"run 'clean' has no dead letters"):
        run(sql_spec(url, redrive="clean"), "r")
    for bad in ({"only_new": True}, {"resume": "first"}, {"redrive": ""}):
        with pytest.raises(ConfigError, match="needs a run id"):
            sql_spec(url, **{"redrive": "first", **bad})
    with pytest.raises(ConfigError, match=r"force applies to a redrive .* or a resume"):
        sql_spec(url, force=True)


def test_a_run_of_another_source_is_refused(url: str, run) -> None:
    run(sql_spec(url), "first")
    execute(url, "CREATE TABLE other (id BIGINT PRIMARY KEY, text TEXT)")
    spec = flat_spec(
        model="tiny", source=url, results=url, results_table="scores", table="other", redrive="first"
    )
    with pytest.raises(ConfigError, match=r"run 'first' read source .*docs'.*other'"):
        run(spec, "r")


def write_parquet(path: Path, rows: list[tuple[int, Any]]) -> None:
    ids, texts = zip(*rows, strict=True)
    table = pa.table({"id": pa.array(ids, pa.int64()), "text": pa.array(texts, pa.string())})
    pq.write_table(table, path, row_group_size=5)


def test_parquet_redrive_after_the_file_was_rewritten(tmp_path: Path, sqlite_url: str, run) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_parquet(data / "part-0.parquet", GOOD + BAD)
    spec = flat_spec(model="tiny", source=str(data), results=sqlite_url, results_table="scores", shards=2)
    _, counts = run(spec, "first")
    assert counts.rows_out == 12 and dead_keys(sqlite_url, "first") == ["100", "101", "102", "103"]

    redrive = flat_spec(
        model="tiny", source=str(data), results=sqlite_url, results_table="scores", redrive="first"
    )
    plan, _ = run(redrive, "nothing-changed")
    assert plan.shards == () and plan.kind == "parquet"

    fixed = [(k, "mended text" if k in (101, 103) else t) for k, t in BAD]
    write_parquet(data / "part-0.parquet", GOOD + fixed)
    plan, counts = run(redrive, "fixed")
    assert [k for s in plan.shards for k in s.bounds["keys"]] == [101, 103]
    assert counts.rows_out == 2 and count(sqlite_url, "SELECT count(*) FROM scores") == 14
    seen = execute(sqlite_url, "SELECT run_id FROM shardwise_objects")
    assert seen == [("first",)], "a redrive reads some rows of an object, so it does not mark it seen"

    _, counts = run(respec(redrive, force=True), "forced")
    assert counts.rows_in == 4 and counts.rows_failed == 2
    assert dead_keys(sqlite_url, "forced") == ["100", "102"]
