"""Generation on every runner: the rows the thread runner writes, greedy and sampled, whatever the batches.

A tiny random causal LM (``tests/hf_builders.py``) generates for a PostgreSQL
table into a results table per runner and decoding; each table's rows
(``generated_text``, ``finish_reason``, token counts, lineage) must equal
those of the thread runner, which scores 4 shards in one worker. Sampling
draws each row from a generator seeded by the seed and the row's prompt, so
neither the worker process nor the rows sharing its batch may change a
text: the thread runner is also run with one row a batch and with every row
in one shard. The other runners have two worker processes each: a process
pool, a local Dask cluster on loopback (at ``address``) and a local Ray, each
of the last two started once for both decodings. Every worker runs one torch
thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline.run_result import RunResult
from shardwise.results.owners import Owner

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 40
DECODING: dict[str, dict[str, Any]] = {
    "greedy": {},
    "sampled": {"temperature": 0.9, "top_p": 0.95, "seed": 11},
}
COLUMNS = (
    "source_key, generated_text, finish_reason, prompt_tokens, completion_tokens, model_version, "
    "input_fingerprint"
)


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


@pytest.fixture(scope="module")
def docs(pg_module_url: str) -> str:
    make_docs(pg_module_url, ROWS)
    return pg_module_url


@pytest.fixture(scope="module")
def by_thread(docs: str, lm: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Each decoding's rows from the thread runner: 4 shards, one worker, the CPU's token budget."""
    return {kind: _generate(docs, lm, "thread", f"thread_{kind}", kind, workers=1)[0] for kind in DECODING}


def _generate(
    url: str,
    lm: Path,
    runner: str,
    table: str,
    kind: str,
    *,
    workers: int | None = 2,
    shards: int = 4,
    seed: int | None = None,
    max_tokens: int | None = None,
    address: str | None = None,
) -> tuple[list[tuple[Any, ...]], RunResult]:
    """Generate into ``table`` on ``runner``; its rows in key order, and the run's summary."""
    generation = {"prompt": "Summarise: {text}", "max_new_tokens": 8, **DECODING[kind]}
    if seed is not None:
        generation["seed"] = seed
    params = ScoreParams.model_validate(
        {
            "source": {"location": url, "table": "docs"},
            "model": {"name": str(lm), "generation": generation},
            "results": {"table": table},
            "run": {"shards": shards, "max_tokens": max_tokens, "precision": "fp32"},
            "fanout": {"runner": runner, "workers": workers, "address": address, "threads": 1},
        }
    )
    state = score(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), state.message
    assert (summary.totals.rows_out, summary.totals.rows_failed) == (ROWS, len(BAD_ROWS))
    return execute(url, f"select {COLUMNS} from {table} order by source_key"), summary


def _worker_pids(url: str, run_id: str) -> set[int]:
    """The processes that scored the run's shards (a worker is named as a lease owner is)."""
    workers = execute(url, "select engine->>'worker' from shardwise_shards where run_id = :r", {"r": run_id})
    return {Owner.parse(worker).pid for (worker,) in workers}  # type: ignore[union-attr]


def _batches(url: str, run_id: str) -> int:
    return int(execute(url, "select sum((engine->>'batches')::int) from shardwise_shards where run_id = :r",
                       {"r": run_id})[0][0])  # fmt: skip


def test_the_thread_runner_generates_every_row_and_sampling_follows_the_seed(
    docs: str, lm: Path, by_thread: dict[str, list[tuple[Any, ...]]]
) -> None:
    greedy, sampled = by_thread["greedy"], by_thread["sampled"]
    assert len(greedy) == len(sampled) == ROWS
    assert all(row[3] > 0 for row in greedy + sampled), "every row has a prompt"
    assert sum(row[4] > 0 for row in greedy + sampled) > ROWS, "rows have new tokens"
    assert len({row[1] for row in sampled}) > ROWS // 2, "sampled texts vary (equal prompts draw alike)"
    assert sum(g[1] != s[1] for g, s in zip(greedy, sampled, strict=True)) > ROWS // 2
    other_seed, _ = _generate(docs, lm, "thread", "thread_seed_12", "sampled", workers=1, seed=12)
    assert sum(a[1] != b[1] for a, b in zip(other_seed, sampled, strict=True)) > ROWS // 2
    assert {row[5] for row in other_seed} != {row[5] for row in sampled}, "the seed is part of the version"


@pytest.mark.parametrize("kind", list(DECODING))
def test_the_batches_a_row_falls_in_do_not_change_its_text(
    docs: str, lm: Path, by_thread: dict[str, list[tuple[Any, ...]]], kind: str
) -> None:
    alone, single = _generate(docs, lm, "thread", f"alone_{kind}", kind, workers=1, max_tokens=1)
    assert _worker_pids(docs, single.run_id) == {os.getpid()}, "the thread runner generates here"
    together, whole = _generate(docs, lm, "thread", f"together_{kind}", kind, workers=1, shards=1)
    assert alone == by_thread[kind] and together == by_thread[kind]
    assert _batches(docs, single.run_id) == ROWS, "a token budget of 1 puts each row in a batch alone"
    assert _batches(docs, whole.run_id) < ROWS


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DECODING))
def test_the_process_runner_generates_the_same_rows(
    docs: str, lm: Path, by_thread: dict[str, list[tuple[Any, ...]]], kind: str
) -> None:
    rows, summary = _generate(docs, lm, "process", f"process_{kind}", kind)
    assert rows == by_thread[kind]
    assert os.getpid() not in _worker_pids(docs, summary.run_id), "worker processes generated"


@pytest.fixture(scope="module")
def dask_cluster(dask_extra: None) -> Iterator[str]:
    """A local Dask cluster of two single-threaded worker processes on loopback; its scheduler's address.

    Both decodings run on it (``address``), so its workers start once."""
    from distributed import LocalCluster

    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address="127.0.0.1:0"
    ) as cluster:
        yield cluster.scheduler_address


@pytest.fixture(scope="module")
def local_ray(ray_extra: None) -> Iterator[None]:
    """The local Ray that the ray runner starts for two workers, started once for both decodings: a ray
    runner entered while Ray runs in this process uses it and leaves it running."""
    from shardwise.tasks.runners import Fanout, FanoutSettings

    with Fanout.of(FanoutSettings(runner="ray", workers=2, threads=1), device="cpu").task_runner():
        yield


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DECODING))
def test_the_dask_runner_generates_the_same_rows(
    docs: str, lm: Path, by_thread: dict[str, list[tuple[Any, ...]]], kind: str, dask_cluster: str
) -> None:
    rows, summary = _generate(docs, lm, "dask", f"dask_{kind}", kind, workers=None, address=dask_cluster)
    assert rows == by_thread[kind]
    assert summary.fanout.workers == 2, "the cluster's two workers, found at its address"
    assert os.getpid() not in _worker_pids(docs, summary.run_id)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(DECODING))
def test_the_ray_runner_generates_the_same_rows(
    docs: str, lm: Path, by_thread: dict[str, list[tuple[Any, ...]]], kind: str, local_ray: None
) -> None:
    rows, summary = _generate(docs, lm, "ray", f"ray_{kind}", kind)
    assert rows == by_thread[kind]
    assert os.getpid() not in _worker_pids(docs, summary.run_id)
