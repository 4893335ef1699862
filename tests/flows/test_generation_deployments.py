"""Generation from the Prefect UI's form and from an event trigger, through the deployments of prefect.yaml.

The form: the ``manual`` deployment is registered on the test harness's
server, a flow run is created through the API with its parameters as the
form submits them (its defaults, a model directory and generation settings),
the server checks them against the flow's schema, and the run is executed
here by Prefect's flow engine with the parameters the server stored, as a
worker executes it. The trigger: the ``on-new-data`` trigger's parameters,
with generation settings as an operator writes them into prefect.yaml, are
rendered for an event the way the server's run-deployment action renders
them, and the run they start generates only the rows that are new or
changed. The model is a tiny random causal LM (``tests/hf_builders.py``).
"""

from __future__ import annotations

import copy
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import GENERATED, generated, tiny_causal_lm

from shardwise.flows.deployments import load_deployment_configs, runner_deployments
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.model.generation import GenerationSettings
from shardwise.models.hf.causal.model import HFCausalSpec

pytestmark = pytest.mark.usefixtures("prefect_harness")
pytest.importorskip("transformers")

ROWS = 12
SETTINGS = {"prompt": "Summarise: {text}", "max_new_tokens": 6, "temperature": 0.8, "top_p": 0.9, "seed": 5}
COLUMNS = ", ".join(("source_key", *GENERATED))
CONFIGS = {config["name"]: config for config in load_deployment_configs()}


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _flow_schema() -> dict[str, Any]:
    from prefect.utilities.callables import parameter_schema

    return parameter_schema(score.fn).model_dump()


def _form(lm: Path, **changes: Any) -> dict[str, Any]:
    """What the form submits for ``manual``: the deployment's parameters, a model directory and
    generation settings typed in (``changes`` among them), float32 for a precision that is the same on
    every CPU."""
    params = copy.deepcopy(CONFIGS["manual"]["parameters"]["params"])
    model = {"name": str(lm), "generation": {**SETTINGS, **changes}}
    return {**params, "model": model, "run": {**params["run"], "precision": "fp32"}}


def _stored(url: str, table: str = "shardwise_results") -> dict[int, tuple[Any, ...]]:
    return {int(k): tuple(rest) for k, *rest in execute(url, f"select {COLUMNS} from {table}")}


def test_the_form_offers_every_generation_setting_and_refuses_bad_values(lm: Path) -> None:
    schema = _flow_schema()
    fields = schema["definitions"]["GenerationParams"]["properties"]
    for name in ("prompt", "system", "chat", "max_new_tokens", "temperature", "top_p", "seed"):
        assert fields[name].get("description", "").startswith("Generators only"), name
    jsonschema.validate({"params": _form(lm)}, schema)
    for bad in ({"temperature": -0.5}, {"max_new_tokens": 0}, {"top_p": 1.5}, {"seed": -1}, {"chat": "yes"}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate({"params": _form(lm, **bad)}, schema)


def _manual_deployment() -> Any:
    (manual,) = [d for d in runner_deployments() if d.name == "manual"]
    return manual.apply()


def test_a_run_from_the_manual_form_generates_with_its_settings(
    sqlite_url: str, lm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment
    from prefect.exceptions import PrefectHTTPStatusError
    from prefect.flow_engine import run_flow

    monkeypatch.setenv("SHARDWISE_SOURCE_URL", sqlite_url)  # the form keeps the deployment's env: name
    rows = make_docs(sqlite_url, ROWS)
    deployment_id = _manual_deployment()
    with pytest.raises(PrefectHTTPStatusError, match="temperature"):  # the server checks the form too
        run_deployment(deployment_id, parameters={"params": _form(lm, temperature=-1)}, timeout=0)
    created = run_deployment(deployment_id, parameters={"params": _form(lm)}, timeout=0)
    with get_client(sync_client=True) as client:
        stored = client.read_flow_run(created.id)  # what a worker reads: the parameters as JSON
    state = run_flow(score, flow_run=stored, parameters=stored.parameters, return_type="state")
    assert state.is_completed(), state.message  # type: ignore[union-attr]

    assert _stored(sqlite_url) == generated(lm, rows[:ROWS], **SETTINGS)
    ((started_by, parameters, version),) = execute(
        sqlite_url, "select started_by, parameters, model_version from shardwise_runs"
    )
    assert started_by == "manual"
    assert all(f'"{name}": {value!r}'.replace("'", '"') in parameters for name, value in SETTINGS.items())
    assert version == HFCausalSpec(lm, generation=GenerationSettings(**SETTINGS)).describe().version
    assert execute(sqlite_url, "select count(*) from shardwise_errors") == [(len(BAD_ROWS),)]


def _trigger_params(lm: Path, event_id: uuid.UUID, prompt: str) -> ScoreParams:
    """The on-new-data trigger's parameters with generation settings added as prefect.yaml would hold
    them, rendered for an event as the server's run-deployment action renders them."""
    from prefect.server.events.actions import RunDeployment
    from prefect.server.events.schemas.events import ReceivedEvent
    from prefect.utilities.schema_tools.hydration import HydrationContext, hydrate

    (trigger,) = CONFIGS["on-new-data"]["triggers"]
    parameters = copy.deepcopy(trigger["parameters"])
    parameters["params"]["model"] = {"name": str(lm), "generation": {**SETTINGS, "prompt": prompt}}
    parameters["params"]["run"]["precision"] = "fp32"
    RunDeployment._upgrade_v1_templates(parameters)
    event = ReceivedEvent(
        id=event_id,
        occurred=datetime.now(timezone.utc),
        event="shardwise.data.landed",
        resource={"prefect.resource.id": trigger["match"]["prefect.resource.id"]},
        payload={"table": "docs", "max_key": 1002, "rows": 3},
    )
    rendered = hydrate(
        parameters, HydrationContext(raise_on_error=True, render_jinja=True, jinja_context={"event": event})
    )
    jsonschema.validate(rendered, _flow_schema())
    return ScoreParams.model_validate(rendered["params"])


def test_a_literal_brace_in_a_triggered_prompt_needs_jinja_raw(lm: Path) -> None:
    """The server renders a trigger's parameter strings holding ``{{`` as Jinja, and a prompt's literal
    braces (``{{`` in a prompt template) are then a Jinja error: no run starts. Inside ``{% raw %}`` they
    reach the run as written, as docs/how-to/deployments.md says."""
    from prefect.utilities.schema_tools.hydration import InvalidJinja

    event = uuid.uuid4()
    wanted = 'Answer as {{"summary": ...}}: {text}'
    assert _trigger_params(lm, event, "{% raw %}" + wanted + "{% endraw %}").model.generation.prompt == wanted
    with pytest.raises(InvalidJinja):
        _trigger_params(lm, event, wanted)


@pytest.mark.postgres
def test_an_event_triggered_run_generates_only_the_new_and_changed_rows(
    pg_url: str, lm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDWISE_SOURCE_URL", pg_url)
    rows = make_docs(pg_url, ROWS, bad=False)
    first = _trigger_params(lm, uuid.uuid4(), SETTINGS["prompt"])
    assert score(first, return_state=True).result().totals.rows_out == ROWS
    before = execute(pg_url, "select source_key, run_id from shardwise_results order by source_key")

    new = [(1001, "a new row about shards"), (1002, "another new row")]
    execute(pg_url, "insert into docs (id, text) values (:id, :text)", [{"id": k, "text": t} for k, t in new])
    execute(pg_url, "update docs set text = 'an edited row' where id = 3")
    event_id = uuid.uuid4()
    state = score(_trigger_params(lm, event_id, SETTINGS["prompt"]), return_state=True)
    summary = state.result()
    assert state.is_completed() and (summary.merge.inserted, summary.merge.updated) == (2, 1)
    assert (summary.totals.rows_in, summary.started_by) == (3, f"event:{event_id}")

    after = dict(execute(pg_url, "select source_key, run_id from shardwise_results"))
    untouched = {k: r for k, r in before if int(k) != 3}
    assert all(after[k] == r for k, r in untouched.items()), "a row that did not change was generated again"
    assert {int(k) for k, r in after.items() if r == summary.run_id} == {3, 1001, 1002}
    current = [*[(3, "an edited row") if k == 3 else (k, t) for k, t in rows], *new]
    assert _stored(pg_url) == generated(lm, current, **SETTINGS)


def test_the_cli_and_the_engine_name_the_same_generation_settings() -> None:
    """The CLI's option list is written out (importing the engine's would load torch before parsing)."""
    from shardwise.flows.params import GenerationParams
    from shardwise.model.generation import SETTINGS

    assert tuple(GenerationParams.model_fields) == SETTINGS
