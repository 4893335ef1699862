"""The command line resolves a run's parameters once: the flow run it starts reuses them, so an existing
cluster is asked its size once, not twice; a flow run started elsewhere resolves them itself."""

from __future__ import annotations

import time
from typing import Any

import pytest
from flow_data import make_docs

from shardwise.flows import resolved as resolved_module
from shardwise.flows.launch import preflight
from shardwise.flows.params import ScoreParams
from shardwise.flows.resolved import KEEP_S, ResolvedRun, hand_over, resolve_run, take_resolved
from shardwise.flows.score import score
from shardwise.tasks.runners import Fanout

pytestmark = pytest.mark.usefixtures("prefect_harness")


@pytest.fixture
def fanouts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Each fan-out resolved (a cluster would be asked its size each time), by runner."""
    made: list[str] = []
    real = Fanout.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Fanout], asked: Any, **kw: Any) -> Fanout:
        made.append(asked.runner)
        return real(cls, asked, **kw)

    monkeypatch.setattr(Fanout, "of", classmethod(counted))
    return made


def _params(url: str) -> ScoreParams:
    return ScoreParams.model_validate(
        {"source": {"location": url, "table": "docs"}, "model": {"name": "tiny"}, "run": {"shards": 2}}
    )


def test_the_flow_run_after_a_preflight_reuses_what_it_resolved(
    sqlite_url: str, fanouts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardwise.models import get_spec

    described: list[str] = []
    kind = type(get_spec("tiny"))
    real = kind.describe

    def counted(self: Any) -> Any:
        described.append(self.name)
        return real(self)

    monkeypatch.setattr(kind, "describe", counted)
    make_docs(sqlite_url, 40)
    params = _params(sqlite_url)
    assert preflight(params) is None
    assert fanouts == ["thread"] and described == ["tiny"]
    state = score(params, return_state=True)
    assert state.is_completed() and state.result().totals.rows_out == 40
    assert fanouts == ["thread"], "the flow took the preflight's resolution"
    assert described == ["tiny"], "the model was described once: planning and the shards took that"
    assert score(params, return_state=True).is_completed()  # a hand-over is taken once
    assert fanouts == ["thread", "thread"], "a second run with the same parameters resolves afresh"


def test_a_hand_over_is_for_its_own_parameters_and_goes_stale(sqlite_url: str, fanouts: list[str]) -> None:
    params, other = _params(sqlite_url), _params(sqlite_url + "?other")
    resolved = resolve_run(params)
    hand_over(params, resolved)
    assert take_resolved(other) is not resolved and take_resolved(params) is resolved
    assert take_resolved(params) is not resolved  # taken already
    stale = ResolvedRun(resolved.spec, resolved.fanout, at=time.monotonic() - KEEP_S - 1)
    hand_over(params, stale)
    assert take_resolved(params) is not stale
    assert params.model_dump_json() not in resolved_module._held  # taken, not left behind
    assert len(fanouts) == 4


def test_a_forbidden_where_is_refused_by_resolving(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from shardwise.errors import ConfigError

    monkeypatch.setenv("SHARDWISE_FORBID_WHERE", "1")
    params = ScoreParams.model_validate(
        {
            "source": {"location": sqlite_url, "table": "docs", "options": {"sql": {"where": "id > 3"}}},
            "model": {"name": "tiny"},
        }
    )
    with pytest.raises(ConfigError, match="where"):
        resolve_run(params)
