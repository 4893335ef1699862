"""New rows -> watcher event -> on-new-data trigger parameters -> an only-new run of exactly the new rows."""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timezone

import pytest
from flow_data import docs_spec, execute, make_docs

from shardwise.flows.deployments import load_deployment_configs
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.watch import PgNotifyWatcher, WatchSpec, install_trigger

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("prefect_harness")]


def _trigger_params(event_id: uuid.UUID, payload: dict, resource: dict) -> ScoreParams:
    """The on-new-data deployment's parameters, rendered as the server renders them for this event."""
    from prefect.server.events.actions import RunDeployment
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    (config,) = [d for d in load_deployment_configs() if d["name"] == "on-new-data"]
    (trigger,) = config["triggers"]
    assert resource["prefect.resource.id"] == trigger["match"]["prefect.resource.id"]
    parameters = copy.deepcopy(trigger["parameters"])
    RunDeployment._upgrade_v1_templates(parameters)
    event = ReceivedEvent(
        id=event_id,
        occurred=datetime.now(timezone.utc),
        event="shardwise.data.landed",
        resource=resource,
        payload=payload,
    )
    rendered = hydrate(
        parameters, HydrationContext(raise_on_error=True, render_jinja=True, jinja_context={"event": event})
    )
    return ScoreParams.model_validate({**rendered["params"], "model": {"name": "tiny"}})


def test_inserted_rows_become_one_event_and_an_only_new_run(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDWISE_SOURCE_URL", pg_url)
    make_docs(pg_url, 150, bad=False)
    base = ScoreParams.model_validate(  # the table the deployments write
        {"source": {"location": pg_url, "table": "docs"}, "model": {"name": "tiny"}}
    )
    assert score(base, return_state=True).is_completed()
    install_trigger(pg_url, "docs", "id")

    emitted: list[tuple[str, dict, dict]] = []
    spec = WatchSpec(pg_url, "docs", table="docs", debounce_s=0.2)
    with PgNotifyWatcher(spec, lambda **e: emitted.append(tuple(e.values()))) as watcher:
        watcher.poll_once(timeout=1.0)  # connect and catch up: nothing changed yet
        emitted.clear()
        execute(pg_url, "insert into docs (id, text) values (1001, 'a new row'), (1002, 'another new row')")
        execute(pg_url, "update docs set text = 'an edited row' where id = 3")
        for _ in range(20):
            watcher.poll_once(timeout=0.5)
            if emitted:
                break
    (name, resource, payload) = emitted[0]
    assert len(emitted) == 1 and name == "shardwise.data.landed"
    assert payload["max_key"] == 1002 and payload["rows"] == 3

    event_id = uuid.uuid4()
    params = _trigger_params(event_id, payload, resource)
    state = score(params, return_state=True)
    summary = state.result()
    assert state.is_completed() and (summary.merge.inserted, summary.merge.updated) == (2, 1)
    assert summary.started_by == f"event:{event_id}"
    assert execute(
        pg_url, "select triggered_by from shardwise_runs where run_id = :r", {"r": summary.run_id}
    ) == [(str(event_id),)]


def test_events_during_a_run_collapse_into_one_follow_up(pg_url: str, pipeline) -> None:
    """concurrency_limit 1 queues the follow-ups; only-new makes the first do all the work."""
    make_docs(pg_url, 100, bad=False)
    spec = docs_spec(pg_url, results_table="shardwise_results", only_new=True)
    in_flight = pipeline.plan(spec, "in-flight")
    try:
        for batch in range(
            3
        ):  # three landings while the run holds its snapshot: three events, three queued runs
            execute(
                pg_url,
                "insert into docs (id, text) values (:id, 'landed during the run')",
                [{"id": 5000 + batch * 10 + i} for i in range(10)],
            )
        pipeline.score(in_flight)
    finally:
        in_flight.close()
    assert execute(pg_url, "select count(*) from shardwise_results") == [(100,)]

    follow_ups = [
        score(
            ScoreParams.model_validate(
                {
                    "source": {"location": pg_url, "table": "docs"},
                    "model": {"name": "tiny"},
                    "run": {"only_new": True},
                    "triggered_by": f"e{i}",
                }
            ),
            return_state=True,
        ).result()
        for i in range(3)
    ]
    assert [f.totals.rows_out for f in follow_ups] == [30, 0, 0]
    assert [f.shards.planned for f in follow_ups] == [1, 0, 0]
    assert execute(pg_url, "select count(*) from shardwise_results") == [(130,)]
