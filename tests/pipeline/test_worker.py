"""The worker side of a run: a small picklable reference, per-process caches, version checks, resume."""

from __future__ import annotations

import pickle
from pathlib import Path

import cloudpickle
import polars as pl
import pytest
import torch
from flow_data import docs_spec, execute, make_docs, texts
from spec_builder import flat_spec, respec

from shardwise.errors import ConfigError
from shardwise.models import get_spec
from shardwise.pipeline import RunRef, WorkerCache, score_ref_shard
from shardwise.results import Ledger


def test_a_run_ref_pickles_and_keeps_connection_names_unresolved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCS_DB", "postgresql+psycopg://app:s3cret@db/prod")
    spec = flat_spec(
        model="tiny", source="env:DOCS_DB", results="secret:results-db", results_table="t", table="docs"
    )
    ref = RunRef("run-1", spec, threads=2)
    for dumps, loads in ((pickle.dumps, pickle.loads), (cloudpickle.dumps, cloudpickle.loads)):
        blob = dumps(ref)
        assert loads(blob) == ref
        assert b"s3cret" not in blob and b"env:DOCS_DB" in blob
    # The spec's settings, a field name each, are about 1 KB; a plan or a model would be many KB.
    assert len(pickle.dumps(ref)) < 1500, "a reference is small: no model, connection or plan in it"


@pytest.mark.parametrize("bad", [{"run_id": ""}, {"threads": 0}])
def test_a_run_ref_checks_itself(bad: dict) -> None:
    spec = flat_spec(
        model="tiny", source="sqlite:///x.db", results="sqlite:///x.db", results_table="t", table="docs"
    )
    with pytest.raises(ConfigError):
        RunRef(**{"run_id": "r", "spec": spec, **bad})


def test_names_need_a_resolver_below_the_orchestrator(sqlite_url: str, pipeline) -> None:
    spec = flat_spec(model="tiny", source="env:DOCS_DB", results=sqlite_url, results_table="t", table="docs")
    with pytest.raises(ConfigError, match="is a name, and this caller gave no resolver"):
        pipeline.plan(spec, "r")


def test_a_worker_loads_its_model_once_for_many_shards(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 200, bad=False)
    # fp32: no precision guard, so the planner loads nothing and the first shard loads the model.
    spec = docs_spec(sqlite_url, shards=10, precision="fp32")
    _, counts = pipeline.run(spec, "ten-shards")
    assert counts.shards_done == 10 and counts.rows_out == 200
    assert pipeline.cache.loads == 1
    stored = Ledger(sqlite_url).shards("ten-shards")
    assert [s.engine["model_load_s"] > 0 for s in stored] == [True] + [False] * 9
    assert {s.engine["worker"] for s in stored} == {stored[0].engine["worker"]}


def test_a_worker_with_another_model_version_refuses(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 30, bad=False)
    spec = docs_spec(sqlite_url, shards=1)
    planned = pipeline.plan(spec, "other-image")
    planned.close()
    execute(sqlite_url, "update shardwise_runs set model_version = 'f00d' || model_version")
    with pytest.raises(ConfigError, match=r"loaded model 'tiny' version \w{12}, but run 'other-image' was"):
        pipeline.shard(planned, 0)
    assert execute(sqlite_url, "select count(*) from scores") == [(0,)]


def test_a_shard_id_outside_the_stored_plan_is_refused(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 30, bad=False)
    spec = docs_spec(sqlite_url, shards=2)
    planned = pipeline.plan(spec, "two")
    planned.close()
    with pytest.raises(
        ConfigError, match=r"shard 7 is not in the stored plan of run 'two' \(shards 0 to 1\)"
    ):
        pipeline.shard(planned, 7)


def test_an_unknown_run_is_refused_by_the_worker(sqlite_url: str) -> None:
    make_docs(sqlite_url, 5, bad=False)
    spec = docs_spec(sqlite_url)
    cache = WorkerCache(get_spec)
    with pytest.raises(ConfigError, match="run 'ghost' is not in the shardwise_runs table"):
        score_ref_shard(RunRef("ghost", spec), 0, cache)


def test_describe_needs_no_device_and_matches_the_loaded_model() -> None:
    for name in ("tiny", "minilm"):
        spec = get_spec(name)
        info = spec.describe()
        model = spec.load(torch.device("cpu"))
        assert (info.name, info.version, info.outputs, info.max_length) == (
            model.name,
            model.version,
            model.outputs,
            model.max_length,
        )


def _write(folder: Path, name: str, ids: list[int], values: list[str]) -> None:
    pl.DataFrame({"id": ids, "text": values}).write_parquet(folder / name, row_group_size=20)


def test_a_resumed_run_keeps_its_stored_plan_and_snapshot(
    tmp_path: Path, sqlite_url: str, pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resume loads the record and plan first: the listing's digest then stays the stored one."""
    import shardwise.pipeline.worker as worker_module

    folder = tmp_path / "landing"
    folder.mkdir()
    body = texts(120)
    _write(folder, "a.parquet", list(range(60)), body[:60])
    _write(folder, "b.parquet", list(range(60, 120)), body[60:])
    spec = flat_spec(model="tiny", source=str(folder), results=sqlite_url, results_table="scores", shards=3)
    planned = pipeline.plan(spec, "first")
    stored_digest = planned.record.source_snapshot
    real = worker_module.score_shard

    def dies_on_shard_2(**kwargs):  # type: ignore[no-untyped-def]
        if kwargs["shard"].shard_id == 2:
            raise RuntimeError("worker lost")
        return real(**kwargs)

    monkeypatch.setattr(worker_module, "score_shard", dies_on_shard_2)
    with pytest.raises(RuntimeError, match="worker lost"):
        pipeline.score(planned)
    planned.close()
    monkeypatch.setattr(worker_module, "score_shard", real)

    _write(folder, "c.parquet", [500, 501], ["landed after the plan", "so not in it"])
    resumed = pipeline.plan(respec(spec, resume="first"), "ignored")
    assert resumed.record.run_id == "first" and resumed.record.source_snapshot == stored_digest
    assert resumed.plan == planned.plan and resumed.todo == (2,) and resumed.source is None
    pipeline.score(resumed)
    resumed.close()
    assert execute(sqlite_url, "select source_snapshot, status from shardwise_runs") == [
        (stored_digest, "completed")
    ]
    assert execute(sqlite_url, "select distinct input_snapshot from scores") == [(stored_digest,)]
    assert execute(sqlite_url, "select count(*), max(source_key) from scores") == [(120, 119)]


def test_resume_checks_what_it_is_asked_against_the_stored_run(sqlite_url: str, pipeline) -> None:
    make_docs(sqlite_url, 20, bad=False)
    spec = docs_spec(sqlite_url, shards=2)
    pipeline.plan(spec, "first").close()
    with pytest.raises(ConfigError, match="run 'nope' is not in the ledger"):
        pipeline.plan(respec(spec, resume="nope"), "r")
    with pytest.raises(ConfigError, match=r"wrote its results to 'scores', not 'other'"):
        pipeline.plan(respec(spec, resume="first", results_table="other"), "r")
    execute(sqlite_url, "create table docs2 (id integer primary key, text text)")
    with pytest.raises(ConfigError, match="resume it with the source it read"):
        pipeline.plan(respec(spec, resume="first", table="docs2"), "r")


def test_warming_loads_the_model_the_run_then_uses(sqlite_url: str, pipeline) -> None:
    """The CLI warms the cache while Prefect starts: planning and every shard then find the model loaded."""
    from shardwise.pipeline import warm

    make_docs(sqlite_url, 60, bad=False)
    spec = docs_spec(sqlite_url, shards=3)
    warm(spec, pipeline.cache)
    assert pipeline.cache.loads == 1
    _, counts = pipeline.run(spec, "warmed")
    assert counts.rows_out == 60 and pipeline.cache.loads == 1
    assert all(s.engine["model_load_s"] == 0 for s in Ledger(sqlite_url).shards("warmed"))
    assert all(
        s.engine["first_batch_at"] <= s.engine["last_batch_at"] for s in Ledger(sqlite_url).shards("warmed")
    )


def test_a_url_given_where_a_section_belongs_is_refused_unshown() -> None:
    from shardwise.errors import ConfigError
    from shardwise.pipeline import ResultsSpec, RunSpec

    with pytest.raises(ConfigError) as refused:
        RunSpec("postgresql+psycopg://app:pa55word@db/prod", ResultsSpec(location="x.db", table="r"))  # type: ignore[arg-type]
    assert str(refused.value) == "source must be a SourceSpec; got a str"
