"""What a run shows in the Prefect UI and emits: artifacts with the right figures, events, no secrets."""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket

import pytest
import sqlalchemy as sa
from flow_data import execute, make_docs

from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score

pytestmark = pytest.mark.usefixtures("prefect_harness")


def _params(url: str, **run: object) -> ScoreParams:
    """Score the table ``docs`` of ``url`` with the tiny model; ``run`` is the run section."""
    return ScoreParams.model_validate(
        {"source": {"location": url, "table": "docs"}, "model": {"name": "tiny"}, "run": run}
    )


SECRET = "topsecret-pw"


def _artifacts(flow_run_id) -> dict[str, object]:
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read():
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )
            return {a.key: a for a in found}

    return asyncio.run(read())


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    captured: list[dict] = []
    module = importlib.import_module("shardwise.tasks.events")
    monkeypatch.setattr(module, "emit_event", lambda **kw: captured.append(kw))
    return captured


def test_artifacts_hold_the_run_figures_and_events_carry_counts(sqlite_url: str, events: list[dict]) -> None:
    make_docs(sqlite_url, 240)
    state = score(_params(sqlite_url, shards=3), return_state=True)
    summary = state.result()
    artifacts = _artifacts(state.state_details.flow_run_id)
    assert {"shardwise-run", "shardwise-shards", "shardwise-progress"} <= set(artifacts)

    markdown = artifacts["shardwise-run"].data
    assert "| Rows scored | 240 (240 new" in markdown and "| Dead letters | 3 |" in markdown
    assert f"{summary.engine.padding_efficiency:.3f}" in markdown and "| OOM splits | 0 |" in markdown
    assert summary.model_version[:16] in markdown and summary.code_version in markdown
    assert f"WHERE run_id = '{summary.run_id}'" in markdown
    assert "| Runner | thread, 1 worker |" in markdown and "## Workers" in markdown
    host = socket.gethostname()
    worker_lines = [line for line in markdown.splitlines() if line.startswith(f"| `{host}:")]
    assert len(worker_lines) == 1 and "| cpu | 3 | 243 |" in worker_lines[0], worker_lines
    table = artifacts["shardwise-shards"].data
    rows = table if isinstance(table, list) else __import__("json").loads(table)
    assert sorted(r["shard"] for r in rows) == [0, 1, 2]
    assert sum(r["scored"] for r in rows) == 240 and sum(r["dead_letters"] for r in rows) == 3
    assert all(r["wall_s"] >= 0 and 0 < r["padding_efficiency"] <= 1 for r in rows)
    assert {(r["host"], r["device"], r["attempt"]) for r in rows} == {(host, "cpu", 1)}
    assert float(artifacts["shardwise-progress"].data) == 100.0

    (event,) = events
    assert event["event"] == "shardwise.run.completed"
    assert event["resource"]["prefect.resource.id"] == f"shardwise.run.{summary.run_id}"
    assert event["related"][0]["prefect.resource.id"] == "shardwise.source.docs"
    assert (event["payload"]["rows_out"], event["payload"]["rows_failed"]) == (240, 3)
    assert event["payload"]["rows_skipped"] == 0
    assert event["payload"]["counts"] == {}, "an encoder counts no tokens"


def test_a_failed_run_emits_failed(
    sqlite_url: str, events: list[dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    infer = importlib.import_module("shardwise.pipeline.worker")
    make_docs(sqlite_url, 50, bad=False)
    monkeypatch.setattr(infer, "score_shard", lambda **kw: (_ for _ in ()).throw(ValueError("boom")))
    state = score(_params(sqlite_url, shards=1), return_state=True)
    assert state.is_failed()
    assert [e["event"] for e in events] == ["shardwise.run.failed"]
    assert events[0]["payload"]["shards_failed"] == 1


@pytest.mark.postgres
def test_no_secret_reaches_logs_artifacts_ledger_or_errors(
    pg_url: str, events: list[dict], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    secret_url = pg_url.replace("root@", f"root:{SECRET}@")  # trust auth ignores the password
    make_docs(pg_url, 60)
    infer = importlib.import_module("shardwise.pipeline.worker")
    real = infer.score_shard

    def leaky(**kwargs):  # an error whose message quotes the connection URL
        if kwargs["shard"].shard_id == 1:
            raise RuntimeError(f"could not reach {secret_url}")
        return real(**kwargs)

    monkeypatch.setattr(infer, "score_shard", leaky)
    caplog.set_level(logging.DEBUG)
    state = score(_params(secret_url, shards=2), return_state=True)
    assert state.is_failed()
    seen = [state.message or "", caplog.text, repr(events)]
    seen += [str(a.data) for a in _artifacts(state.state_details.flow_run_id).values()]
    engine = sa.create_engine(pg_url)
    with engine.connect() as conn:
        for table in ("shardwise_runs", "shardwise_shards", "shardwise_errors", "shardwise_results"):
            seen += [repr(row) for row in conn.execute(sa.text(f"select * from {table}"))]
    engine.dispose()
    leaks = [line for text in seen for line in text.splitlines() if SECRET in line]
    assert not leaks, leaks[:3]
    assert any("***" in text for text in seen), "the redacted URL is still there, masked"


def test_dry_run_writes_nothing(sqlite_url: str, events: list[dict]) -> None:
    make_docs(sqlite_url, 80)
    state = score(_params(sqlite_url, shards=2, dry_run=True), return_state=True)
    report = state.result()
    assert (report["shards"], report["rows"]) == (2, 83) and report["prompt_tokens"] > 0
    assert report["rows_already_scored"] == 0
    assert "shardwise-plan" in _artifacts(state.state_details.flow_run_id)
    tables = {r[0] for r in execute(sqlite_url, "select name from sqlite_master where type = 'table'")}
    assert tables == {"docs"} and not events
