"""Resuming a run another process still holds: refused (CLI and flow parameter), taken over by force,
and the old flow run ends Crashed instead of Running forever."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from uuid import UUID

import pytest
from flow_data import execute, make_docs
from spec_builder import flat_spec

from shardwise.errors import RunTakenOverError
from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline import finish_run

pytestmark = pytest.mark.usefixtures("prefect_harness")

ROWS = 60


def _running_flow_run() -> UUID:
    """A flow run of ``score`` left Running, as a killed process leaves it."""
    from prefect import get_client
    from prefect.states import Running

    with get_client(sync_client=True) as client:
        return client.create_flow_run(score, state=Running()).id


def _flow_run_state(flow_run_id: UUID) -> tuple[str, str]:
    from prefect import get_client

    with get_client(sync_client=True) as client:
        state = client.read_flow_run(flow_run_id).state
    assert state is not None
    return state.type.value, state.message or ""


def test_a_live_run_is_refused_until_forced_and_its_old_flow_run_ends_crashed(
    sqlite_url: str, pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS, bad=False)
    old = _running_flow_run()
    spec = flat_spec(
        source=sqlite_url, results=sqlite_url, results_table="shardwise_results", table="docs",
        model="tiny", shards=2, lease_s=2,
    )  # fmt: skip
    with ThreadPoolExecutor(1) as other_process:  # another thread: another owner, renewing its lease
        holder = other_process.submit(pipeline.plan, spec, str(old)).result()
    assert holder.owner is not None and holder.keeper is not None

    common = ["--source", sqlite_url, "--table", "docs", "--model", "tiny", "--resume", str(old)]
    time.sleep(2.5)  # past the first lease: only renewal keeps it live
    assert main(["run", *common]) == 2
    err = capsys.readouterr().err
    assert f"still running on {holder.owner}" in err and "--force" in err and len(err.splitlines()) == 1
    assert execute(sqlite_url, "select count(*) from shardwise_results") == [(0,)], "nothing was scored"
    assert execute(sqlite_url, "select max(attempts) from shardwise_shards") == [(0,)]

    state = score(
        ScoreParams.model_validate(
            {
                "source": {"location": sqlite_url, "table": "docs"},
                "model": {"name": "tiny"},
                "run": {"resume": str(old)},
            }
        ),
        return_state=True,
    )
    assert state.is_failed() and "still running on" in str(state.result(raise_on_failure=False))

    assert main(["run", *common, "--force"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"run {old} completed (resumed)" in out and f"this invocation: {ROWS} rows scored" in out
    kind, message = _flow_run_state(old)
    assert kind == "CRASHED" and "superseded" in message and f"taken over from {holder.owner}" in message

    deadline = time.monotonic() + 5
    while not holder.keeper.lost and time.monotonic() < deadline:
        time.sleep(0.1)
    assert holder.keeper.lost, "the first process learns at its next renewal that it lost the run"
    with pytest.raises(RunTakenOverError, match="was taken over by"):
        finish_run(holder, [])
    holder.close()
    assert execute(sqlite_url, "select status from shardwise_runs") == [("completed",)]
