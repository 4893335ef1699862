"""SHARDWISE_FORBID_WHERE: a deployment refuses free-form filters, in the CLI's preflight and in the flow."""

from __future__ import annotations

import pytest
from flow_data import make_docs

from shardwise.errors import ConfigError
from shardwise.flows.cli import main
from shardwise.flows.launch import preflight
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.flows.where_policy import FORBID_WHERE, refuse_forbidden_where


@pytest.mark.parametrize("setting", [None, "", "0", "false", "No"])
def test_filters_are_allowed_by_default_and_when_off(
    monkeypatch: pytest.MonkeyPatch, setting: str | None
) -> None:
    if setting is None:
        monkeypatch.delenv(FORBID_WHERE, raising=False)
    else:
        monkeypatch.setenv(FORBID_WHERE, setting)
    refuse_forbidden_where("id > 1")


@pytest.mark.parametrize("setting", ["1", "true", "TRUE", "yes"])
def test_a_filter_is_refused_when_forbidden(monkeypatch: pytest.MonkeyPatch, setting: str) -> None:
    monkeypatch.setenv(FORBID_WHERE, setting)
    with pytest.raises(ConfigError, match=r"where filter 'id > 1' refused: this deployment forbids") as info:
        refuse_forbidden_where("id > 1")
    assert len(str(info.value).splitlines()) == 1 and f"{FORBID_WHERE}={setting}" in str(info.value)
    refuse_forbidden_where(None)  # no filter, nothing to refuse
    refuse_forbidden_where("")


def test_a_typo_in_the_setting_does_not_let_a_filter_through(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FORBID_WHERE, "ture")
    with pytest.raises(ConfigError, match=rf"{FORBID_WHERE} must be 1/true/yes or 0/false/no; got 'ture'"):
        refuse_forbidden_where("id > 1")


def test_preflight_and_the_flow_refuse_before_anything_runs(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 5)
    monkeypatch.setenv(FORBID_WHERE, "1")
    params = ScoreParams.model_validate(
        {
            "source": {"location": sqlite_url, "table": "docs", "options": {"sql": {"where": "id > 1"}}},
            "model": {"name": "tiny"},
        }
    )
    with pytest.raises(ConfigError, match="forbids free-form filters"):
        preflight(params)
    with pytest.raises(ConfigError, match="forbids free-form filters"):
        score.fn(params)  # the flow's body: a run from the UI, an event or a schedule is refused too
    code = main(["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--where", "id > 1"])
    err = capfd.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "forbids free-form filters" in err, err
