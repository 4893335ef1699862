"""Live progress of a score flow run: listeners see a shard move while it runs, then the final count."""

from __future__ import annotations

import re
import time

import pytest
from flow_data import BAD_ROWS, make_docs, slow_tiny_shards

from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline import ProgressReading
from shardwise.pipeline.run_result import RunResult
from shardwise.tasks.progress import listening

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROWS = 600


@pytest.fixture
def slow_scoring(monkeypatch: pytest.MonkeyPatch) -> None:
    """A shard of the tiny model lasts a few seconds; shards report and the flow reads often."""
    from shardwise.tasks import progress

    slow_tiny_shards(monkeypatch, 0.04, 0.05)
    monkeypatch.setattr(progress, "POLL_EVERY_S", 0.1)


def _watched_run(url: str) -> tuple[RunResult, list[ProgressReading]]:
    make_docs(url, ROWS)
    seen: list[ProgressReading] = []
    with listening(seen.append):
        state = score(
            ScoreParams.model_validate(
                {
                    "source": {"location": url, "table": "docs"},
                    "model": {"name": "tiny"},
                    "run": {"shards": 1, "precision": "fp32"},
                    "fanout": {"runner": "thread"},
                }
            ),
            return_state=True,
        )
    assert state.is_completed(), state.message
    return state.result(), seen


def _check(summary: RunResult, seen: list[ProgressReading]) -> None:
    total = ROWS + len(BAD_ROWS)
    assert {s.run_id for s in seen} == {summary.run_id}
    running = [s for s in seen if not s.final and 0 < s.rows_done < s.rows_total]
    assert running, f"no snapshot caught the shard mid-way: {seen}"
    assert all(s.shards_done == 0 and s.shards_total == 1 and s.rows_total == total for s in running)
    assert [s.rows_done for s in seen] == sorted(s.rows_done for s in seen), "progress only moves forward"
    final = seen[-1]
    assert final.final and [s.final for s in seen].count(True) == 1
    assert (final.shards_done, final.shards_failed, final.rows_done, final.rows_total) == (1, 0, total, total)
    assert final.dead_letters == len(BAD_ROWS) and final.percent == 100.0


def test_a_listener_sees_a_sqlite_run_move_within_its_shard(sqlite_url: str, slow_scoring: None) -> None:
    _check(*_watched_run(sqlite_url))


@pytest.mark.postgres
def test_a_listener_sees_a_postgres_run_move_within_its_shard(pg_url: str, slow_scoring: None) -> None:
    _check(*_watched_run(pg_url))


def test_the_progress_artifact_ends_at_the_runs_counts(sqlite_url: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    make_docs(sqlite_url, 50, bad=False)
    params = {
        "source": {"location": sqlite_url, "table": "docs"},
        "model": {"name": "tiny"},
        "run": {"shards": 2},
    }
    state = score(ScoreParams.model_validate(params), return_state=True)
    assert state.is_completed(), state.message
    with get_client(sync_client=True) as client:
        found = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["shardwise-progress"]))
        )
    mine = [a for a in found if a.flow_run_id == state.state_details.flow_run_id]
    assert mine and mine[0].data == 100.0
    # As the CLI's line says it; an encoder declares no count outputs, so no tokens/s.
    assert re.fullmatch(
        r"2/2 shards, 50/50 rows, [\d,]+ rows/s, took \d+ s, 0 dead letters", mine[0].description
    )


def test_a_listener_asking_for_readings_more_often_gets_the_ledger_read_that_often(sqlite_url: str) -> None:
    """``--progress-every 0.2``: each line is a fresh reading, not the last of polls a second apart."""
    from shardwise.results import Ledger
    from shardwise.tasks.progress import POLL_EVERY_S, ProgressPublisher

    def readings(every_s: float | None) -> int:
        seen: list[ProgressReading] = []
        with Ledger(sqlite_url) as ledger, listening(seen.append, every_s):
            ledger.ensure()
            with ProgressPublisher(ledger, "watched", every_s=POLL_EVERY_S):
                time.sleep(0.6)
        return len(seen)

    assert POLL_EVERY_S >= 1.0
    assert readings(None) == 2, "the first reading, then the final one: no poll fell within 0.6 s"
    assert readings(0.05) >= 6, "a reading about every 0.05 s"
