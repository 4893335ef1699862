"""What a run started from a deployment may load: no module its worker's operator did not allow.

The deployment's flow run is created through the API, as the UI's form creates one, and run here by
Prefect's flow engine, as a worker runs it: ``prefect.runtime`` then knows its deployment.
"""

from __future__ import annotations

import sys
import types
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from flow_data import execute, make_docs

from shardwise.errors import ConfigError
from shardwise.flows.cli import main
from shardwise.flows.score import score
from shardwise.models import ALLOW_MODULES_SETTING, TinySpec, check_deployment_model

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
def plugin_module(monkeypatch: pytest.MonkeyPatch) -> str:
    """An importable module holding a tiny model spec; its name."""
    name = f"policy_plugin_{uuid.uuid4().hex[:8]}"
    found = types.ModuleType(name)
    found.spec = TinySpec(name="allowed-tiny", dim=16, layers=1, heads=2)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, found)
    return name


def _run_from_deployment(params: dict[str, object]) -> Callable[[], object]:
    """Create a flow run of a ``score`` deployment through the API; a function that runs it here."""
    from prefect.deployments import run_deployment
    from prefect.flow_engine import run_flow

    deployment_id = score.to_deployment(name=f"policy-{uuid.uuid4().hex[:6]}").apply()
    flow_run = run_deployment(deployment_id, parameters={"params": params}, timeout=0)
    return lambda: run_flow(score, flow_run=flow_run, parameters={"params": params}, return_type="state")


def _runs(url: str) -> int:
    try:
        return int(execute(url, "select count(*) from shardwise_runs")[0][0])
    except Exception:  # no ledger yet: nothing was recorded
        return 0


def test_a_deployment_run_naming_an_unlisted_module_fails_before_anything_runs(
    sqlite_url: str, plugin_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_docs(sqlite_url, 10)
    monkeypatch.delenv(ALLOW_MODULES_SETTING, raising=False)
    params = {"source": {"location": sqlite_url, "table": "docs"}, "model": {"name": f"{plugin_module}:spec"}}
    state = _run_from_deployment(params)()
    assert state.is_failed(), state  # type: ignore[attr-defined]
    message = str(state.message)  # type: ignore[attr-defined]
    assert f"export {ALLOW_MODULES_SETTING}={plugin_module}" in message, message
    assert _runs(sqlite_url) == 0, "refused before the run was recorded"


def test_a_module_the_operator_allows_runs_from_a_deployment(
    sqlite_url: str, plugin_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_docs(sqlite_url, 10)
    monkeypatch.setenv(ALLOW_MODULES_SETTING, f"some_other_pkg, {plugin_module}")
    params = {"source": {"location": sqlite_url, "table": "docs"}, "model": {"name": f"{plugin_module}:spec"}}
    state = _run_from_deployment(params)()
    assert state.is_completed(), state  # type: ignore[attr-defined]
    assert execute(sqlite_url, "select min(model_name), count(*) from shardwise_results") == [
        ("allowed-tiny", 10)
    ]


def test_the_command_line_takes_a_module_spec_but_never_a_callable(
    sqlite_url: str, plugin_module: str, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 10)
    common = ["run", "--source", sqlite_url, "--table", "docs", "--progress", "none"]
    for reference in ("sys:exit", "code:interact", "os:fork"):
        assert main([*common, "--model", reference]) == 2
        err = capfd.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "is never called" in err, err
    assert _runs(sqlite_url) == 0
    assert main([*common, "--model", f"{plugin_module}:spec"]) == 0


@pytest.mark.parametrize(
    ("name", "allowed", "refused"),
    [
        ("tiny", None, False),
        ("minilm", None, False),
        ("sys:exit", None, True),
        ("acme.models:spec", "acme", False),
        ("acme.models:spec", "acme.models", False),
        ("acme.models:spec", "acme.other", True),
        ("acmebad.models:spec", "acme", True),
        ("acme.models:spec", "*", False),
        ("acme.models:spec", " , ", True),
    ],
)
def test_the_allow_list_names_modules_and_their_submodules(
    name: str, allowed: str | None, refused: bool
) -> None:
    if refused:
        with pytest.raises(ConfigError, match=ALLOW_MODULES_SETTING):
            check_deployment_model(name, allowed)
    else:
        check_deployment_model(name, allowed)


def test_a_model_directory_is_not_a_module(tmp_path: Path) -> None:
    folder = tmp_path / "weights:v1"
    folder.mkdir()
    check_deployment_model(str(folder), None)  # a directory loads weights, never code
