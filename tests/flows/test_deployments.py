"""prefect.yaml is validated loosely by Prefect, so check every deployment against what it must hold."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import jsonschema
import pytest
from cronsim import CronSim

from shardwise.flows.deployments import load_deployment_configs, load_entrypoint
from shardwise.flows.params import FanoutParams, ResultsParams, ScoreParams
from shardwise.flows.score import score

ALL = {d["name"]: d for d in load_deployment_configs()}
DEPLOYMENTS = {name: d for name, d in ALL.items() if name != "per-shard"}


def _flow_schema() -> dict:
    from prefect.utilities.callables import parameter_schema

    return parameter_schema(score.fn).model_dump()


def test_the_three_deployments_exist_and_point_at_the_score_flow() -> None:
    assert set(DEPLOYMENTS) == {"nightly", "manual", "on-new-data"}
    for config in DEPLOYMENTS.values():
        assert load_entrypoint(config["entrypoint"]) is score
        assert config["work_pool"]["name"] == "shardwise-local"
        assert config.get("description")


def test_the_per_shard_deployment_is_the_one_the_deployment_runner_starts() -> None:
    from shardwise.flows.score_shard import score_shard

    config = ALL["per-shard"]
    assert load_entrypoint(config["entrypoint"]) is score_shard
    assert f"{score_shard.name}/{config['name']}" == FanoutParams.model_fields["deployment"].default
    assert config["work_pool"]["name"] == "shardwise-local" and not config.get("parameters")
    for name in ("nightly", "manual"):
        assert DEPLOYMENTS[name]["parameters"]["params"]["fanout"]["runner"] == "thread"


@pytest.mark.parametrize("name", ["nightly", "manual", "on-new-data"])
def test_parameters_match_the_flow_schema(name: str) -> None:
    config = DEPLOYMENTS[name]
    params = config["triggers"][0]["parameters"] if name == "on-new-data" else config["parameters"]
    jsonschema.validate(params, _flow_schema())
    ScoreParams.model_validate(params["params"])


SECTIONS = ("ScoreParams", "SourceParams", "ModelParams", "GenerationParams", "ResultsParams", "RunParams")


def _form_fields() -> dict[str, dict]:
    """Every field of every section of the form, as ``Section.field``; a section's own field is shown
    with its section's description (Prefect's schema keeps a bare ``$ref`` there)."""
    definitions = _flow_schema()["definitions"]
    fields = {}
    for section in (*SECTIONS, "FanoutParams"):
        for name, field in definitions[section]["properties"].items():
            ref = field.get("$ref", "").rsplit("/", 1)[-1]
            if ref in definitions and "description" not in field:
                field = {**field, "description": definitions[ref].get("description")}
            fields[f"{section}.{name}"] = field
    return fields


def test_every_form_field_is_described() -> None:
    properties = _form_fields()
    missing = [name for name, field in properties.items() if not field.get("description")]
    assert not missing, f"fields without a description in the UI form: {missing}"
    for wanted in ("ScoreParams.source", "ScoreParams.model", "ScoreParams.run", "SourceParams.location"):
        assert wanted in properties
    for wanted in ("shards", "max_tokens", "only_new", "dry_run"):
        assert f"RunParams.{wanted}" in properties


def test_the_form_renders_its_descriptions_and_marks_internal_fields() -> None:
    properties = _form_fields()
    # The UI renders descriptions as Markdown and HTML: a <word> would vanish.
    swallowed = {name: f["description"] for name, f in properties.items() if "<" in f["description"]}
    assert not swallowed, swallowed
    assert "internal" in properties["ScoreParams.triggered_by"]["title"].lower()


@pytest.mark.parametrize("name", ["nightly", "manual", "on-new-data"])
def test_deployments_write_where_the_cli_writes(name: str) -> None:
    """After the walk-through, `shardwise plan --only-new` must see what the deployments scored."""
    config = DEPLOYMENTS[name]
    params = config["triggers"][0]["parameters"] if name == "on-new-data" else config["parameters"]
    default = ResultsParams.model_fields["table"].default
    table = params["params"].get("results", {}).get("table", default)
    assert table == default == "shardwise_results"


def test_nightly_runs_at_two_in_a_named_timezone_and_incrementally() -> None:
    nightly = DEPLOYMENTS["nightly"]
    (schedule,) = nightly["schedules"]
    assert schedule["cron"] == "0 2 * * *"
    tz = ZoneInfo(schedule["timezone"])
    first = next(CronSim(schedule["cron"], datetime(2026, 1, 1, 12, tzinfo=tz)))
    assert (first.hour, first.minute) == (2, 0)
    assert nightly["parameters"]["params"]["run"]["only_new"] is True
    assert nightly["concurrency_limit"] == 1


def test_manual_has_no_schedule_and_form_friendly_defaults() -> None:
    manual = DEPLOYMENTS["manual"]
    assert not manual.get("schedules") and not manual.get("triggers")
    params = manual["parameters"]["params"]
    assert params["run"]["only_new"] is False and params["run"]["dry_run"] is False


def test_on_new_data_trigger_renders_to_an_only_new_run() -> None:
    """Render the trigger's parameters the way the server's run-deployment action does."""
    import copy

    from prefect.server.events.actions import RunDeployment
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    deployment = DEPLOYMENTS["on-new-data"]
    assert deployment["concurrency_limit"] == 1
    (trigger,) = deployment["triggers"]
    assert trigger["expect"] == ["shardwise.data.landed"]
    resource_id = trigger["match"]["prefect.resource.id"]
    assert resource_id.startswith("shardwise.source.")
    event = ReceivedEvent(
        id=uuid.uuid4(),
        occurred=datetime.now(timezone.utc),
        event="shardwise.data.landed",
        resource={"prefect.resource.id": resource_id},
        payload={"table": "docs", "max_key": 41, "rows": 2},
    )
    parameters = copy.deepcopy(trigger["parameters"])
    RunDeployment._upgrade_v1_templates(parameters)
    rendered = hydrate(
        parameters, HydrationContext(raise_on_error=True, render_jinja=True, jinja_context={"event": event})
    )
    json.dumps(rendered)  # the action sends them as JSON: a bare {{ event.id }} would fail here
    params = ScoreParams.model_validate(rendered["params"])
    assert params.run.only_new and params.triggered_by == str(event.id)
    assert params.event_name() == resource_id.removeprefix("shardwise.source.")


def test_no_deployment_holds_a_connection_url() -> None:
    for config in ALL.values():
        blocks = [config.get("parameters", {})] + [t["parameters"] for t in config.get("triggers", [])]
        for block in blocks:
            params = block.get("params", {})
            found = {
                "source.location": params.get("source", {}).get("location"),
                "results.location": params.get("results", {}).get("location"),
                "ledger": params.get("ledger"),
            }
            for field, value in found.items():
                if value is not None:
                    assert value.startswith(("env:", "secret:")), f"{config['name']}.{field} holds {value!r}"
            assert not params or found["source.location"], "the check reads where the source is"


def test_deployments_build_for_serve() -> None:
    from shardwise.flows.deployments import runner_deployments

    built = {d.name: d for d in runner_deployments()}
    assert set(built) == set(ALL)
    assert built["nightly"].schedules and built["nightly"].schedules[0].schedule.cron == "0 2 * * *"
    assert built["on-new-data"].triggers[0].expect == {"shardwise.data.landed"}
    assert built["on-new-data"].concurrency_limit == 1


def test_a_deployments_file_that_is_no_regular_file_or_too_big_is_one_line(tmp_path) -> None:
    """``serve --prefect-yaml FIFO`` once waited for a writer for ever: now refused before a byte is read."""
    import os

    from shardwise.errors import ConfigError
    from shardwise.flows.deployments import MAX_DEPLOYMENTS_BYTES

    fifo, big, broken = tmp_path / "fifo.yaml", tmp_path / "big.yaml", tmp_path / "broken.yaml"
    os.mkfifo(fifo)
    big.write_text("# " + "x" * MAX_DEPLOYMENTS_BYTES)
    broken.write_text("deployments: [unclosed\n")
    expected = {
        fifo: "is a FIFO (named pipe), not a regular file",
        big: "is larger than 1 MiB, the most read for it; give a smaller file",
        broken: "is not YAML (",
    }
    for path, said in expected.items():
        with pytest.raises(ConfigError) as caught:
            load_deployment_configs(path)
        assert said in str(caught.value) and "\n" not in str(caught.value), caught.value
