"""Fan-out on every runner: the same results whatever runs the shards, and refusals that name the fix.

The results of one PostgreSQL table are scored by each runner into a table of
its own; a checksum over (source_key, output) must equal the thread runner's.
Every worker runs one torch thread, so the arithmetic is the same everywhere.
"""

from __future__ import annotations

import pytest
from flow_data import checksum, execute, synthetic_docs
from spec_builder import flat_spec

from shardwise.errors import ConfigError
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline.run_result import RunResult
from shardwise.tasks.runners import Fanout, FanoutSettings, cores

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROWS = 3000


@pytest.fixture(scope="module")
def docs(pg_module_url: str) -> str:
    synthetic_docs(pg_module_url, ROWS)
    return pg_module_url


@pytest.fixture(scope="module")
def thread_checksum(docs: str) -> tuple[int, str]:
    state = score(_params(docs, "thread", table="by_thread", workers=1), return_state=True)
    assert state.is_completed(), state.message
    return checksum(docs, "by_thread")


def _params(
    url: str,
    runner: str,
    table: str = "shardwise_results",
    workers: int | None = None,
    results: str | None = None,
) -> ScoreParams:
    return ScoreParams.model_validate(
        {
            "source": {"location": url, "table": "docs"},
            "model": {"name": "tiny"},
            "results": {"location": results, "table": table},
            "run": {"shards": 8},
            "fanout": {"runner": runner, "workers": workers, "threads": 1},
        }
    )


def _run_on(url: str, runner: str, table: str, **extra: object) -> RunResult:
    state = score(_params(url, runner, table=table, workers=2), return_state=True)
    summary = state.result()
    assert state.is_completed(), state.message
    return summary


@pytest.mark.postgres
def test_the_thread_runner_scores_every_valid_row(docs: str, thread_checksum: tuple[int, str]) -> None:
    assert thread_checksum[0] == ROWS - ROWS // 997
    assert execute(docs, "select count(*) from shardwise_errors") == [(ROWS // 997,)]


@pytest.mark.postgres
def test_the_process_runner_gives_the_same_results(docs: str, thread_checksum: tuple[int, str]) -> None:
    summary = _run_on(docs, "process", "by_process")
    assert checksum(docs, "by_process") == thread_checksum
    assert (summary.fanout.runner, summary.fanout.workers, summary.fanout.workers_used) == ("process", 2, 2)
    hosts = execute(
        docs,
        "select count(distinct engine->>'worker'), count(*) filter (where host is null or device is null) "
        "from shardwise_shards where run_id = :r",
        {"r": summary.run_id},
    )
    assert hosts == [(2, 0)], "two worker processes, and every shard names its host and device"
    loads = execute(
        docs,
        "select engine->>'worker', count(*) filter (where (engine->>'model_load_s')::float > 0) "
        "from shardwise_shards where run_id = :r group by 1",
        {"r": summary.run_id},
    )
    assert sorted(n for _, n in loads) == [1, 1], "each worker process loaded the model once"
    snapshots = execute(docs, "select distinct input_snapshot from by_process")
    assert snapshots == [(summary.snapshot,)], "worker processes imported the planner's snapshot"


@pytest.mark.postgres
@pytest.mark.slow
def test_the_dask_runner_gives_the_same_results(
    docs: str, thread_checksum: tuple[int, str], dask_extra: None
) -> None:
    summary = _run_on(docs, "dask", "by_dask")
    assert checksum(docs, "by_dask") == thread_checksum
    assert summary.fanout.workers_used == 2


@pytest.mark.postgres
@pytest.mark.slow
def test_the_ray_runner_gives_the_same_results(
    docs: str, thread_checksum: tuple[int, str], ray_extra: None
) -> None:
    summary = _run_on(docs, "ray", "by_ray")
    assert checksum(docs, "by_ray") == thread_checksum
    assert summary.fanout.workers_used >= 1


def test_local_runners_share_the_cores_out() -> None:
    fanout = Fanout.of(FanoutSettings(runner="process", workers=2), device="cpu")
    assert (fanout.workers, fanout.threads) == (2, max(1, cores() // 2))
    assert Fanout.of(FanoutSettings(runner="thread"), device="cpu").workers == 1, (
        "one worker per device; a CPU is one"
    )
    assert Fanout.of(FanoutSettings(runner="dask", workers=3, threads=1), device="cpu").threads == 1
    assert (
        Fanout(FanoutSettings(runner="dask"), 3, 2).describe()
        == "on the dask runner with 3 workers, 2 torch threads each"
    )
    assert Fanout(FanoutSettings(runner="ray"), 1, None).describe() == "on the ray runner with 1 worker"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"runner": "thread", "address": "tcp://127.0.0.1:8786"}, "only the dask and ray runners use"),
        ({"runner": "process", "address": "tcp://127.0.0.1:8786"}, "drop --address"),
        ({"runner": "k8s"}, "runner must be one of thread, process, dask, ray, deployment"),
    ],
)
def test_runner_settings_that_cannot_work_are_refused(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        FanoutSettings(**kwargs)


@pytest.mark.parametrize(
    ("source", "results", "match"),
    [
        ("sqlite:///here.db", None, r"source 'sqlite:///here.db' is a file on this host"),
        ("/data/landing", "postgresql+psycopg://db/x", r"source '/data/landing' is a file on this host"),
        (
            "s3://bucket/docs/",
            "sqlite:///results.db",
            r"results 'sqlite:///results.db' are on this host \(an SQLite file",
        ),
        (
            "s3://bucket/docs/",
            "/data/lake",
            r"results '/data/lake' are on this host \(an SQLite file or a local",
        ),
        (
            "s3://bucket/docs/",
            "s3://bucket/lake",
            r"the run's ledger is an SQLite file on this host.*--ledger",
        ),
    ],
)
def test_local_files_are_refused_when_workers_may_be_elsewhere(
    source: str, results: str | None, match: str
) -> None:
    from shardwise.pipeline import as_is

    spec = flat_spec(model="tiny", source=source, results=results or source, results_table="t", table=None)
    remote = Fanout(FanoutSettings(runner="deployment"), 1, None)
    with pytest.raises(ConfigError, match=match + r".*(PostgreSQL|postgresql)"):
        remote.check_reachable(spec, as_is)
    Fanout(FanoutSettings(runner="process"), 2, 1).check_reachable(spec, as_is)  # one host: fine


@pytest.mark.postgres
def test_a_flow_run_with_a_remote_runner_refuses_sqlite_results_before_planning(
    docs: str, sqlite_url: str
) -> None:
    params = _params(docs, "deployment", results=sqlite_url)
    state = score(params, return_state=True)
    assert state.is_failed() and "are on this host (an SQLite file" in (state.message or "")
    if execute(docs, "select to_regclass('shardwise_runs') is not null")[0][0]:
        recorded = "select count(*) from shardwise_runs where parameters->'fanout'->>'runner' = 'deployment'"
        assert execute(docs, recorded) == [(0,)], "refused before anything was recorded"


def test_the_flow_and_its_tasks_travel_by_value_without_process_state() -> None:
    """Dask and the process pool cloudpickle the flow's tasks: none may capture the worker cache's locks."""
    import cloudpickle

    from shardwise.flows.score import score
    from shardwise.flows.score_shard import score_shard
    from shardwise.tasks.infer_shard import infer_shard
    from shardwise.tasks.plan_run import plan_run

    for travelling in (score, score_shard, infer_shard, plan_run):
        assert cloudpickle.loads(cloudpickle.dumps(travelling)) is not None


def test_a_local_dask_cluster_runs_no_profiler(dask_extra: None) -> None:
    """Dask's statistical profiler would sample the scoring thread every 10 ms, on the workers' cores."""
    import dask
    from distributed import Client, LocalCluster

    kwargs = (
        Fanout.of(FanoutSettings(runner="dask", workers=1, threads=1), device="cpu")
        .task_runner()
        .cluster_kwargs
    )
    with LocalCluster(**kwargs) as cluster, Client(cluster) as client:
        profiling = client.run(lambda: dask.config.get("distributed.worker.profile.enabled"))
    assert list(profiling.values()) == [False]
    assert dask.config.get("distributed.worker.profile.enabled"), "only the cluster's workers are quiet"


def _load_torch_and_a_model() -> int:
    """What a shard does to a worker process: import the shard task (Prefect, torch) and load a model."""
    import torch

    import shardwise.tasks.infer_shard  # noqa: F401
    from shardwise.models import get_spec

    model = get_spec("tiny").load(torch.device("cpu"))
    return len(model.outputs) + int(torch.ones(64, 64).sum().item())


def test_a_local_dask_cluster_closes_without_killing_its_workers(
    dask_extra: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that loaded torch used to spend seconds freeing modules at exit and was killed after 4 s."""
    import logging
    import time

    from distributed import Client, LocalCluster

    kwargs = (
        Fanout.of(FanoutSettings(runner="dask", workers=2, threads=1), device="cpu")
        .task_runner()
        .cluster_kwargs
    )
    with caplog.at_level(logging.INFO, logger="distributed"):
        cluster = LocalCluster(**kwargs)
        with Client(cluster) as client:
            assert len(set(client.run(_load_torch_and_a_model).values())) == 1
        started = time.monotonic()
        cluster.close()
        took = time.monotonic() - started
    assert "still alive" not in caplog.text and "killed by signal" not in caplog.text, caplog.text
    assert took < 3.5, f"closing the cluster took {took:.1f} s"
