"""Start the score flow from the command line and report on it; preview a plan without running."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flows.params import ScoreParams
from shardwise.pipeline import check_connections, open_spec_source
from shardwise.redact import redact
from tasks.connections import resolve

__all__ = ["preflight", "print_plan", "run_and_report"]


def preflight(params: ScoreParams) -> None:
    """Fail fast, before a flow run starts, on a bad model, table, column, runner or cluster address."""
    from models import get_spec

    spec = params.to_spec()
    if params.runner == "deployment":
        from flows.serving import require_server

        require_server()  # child flow runs need a server that a work pool's worker polls
    get_spec(spec.model)
    check_connections(spec, resolve(spec.source), resolve(spec.results))
    params.fanout().check_reachable(spec, resolve)
    open_spec_source(spec, resolve).close()


def run_and_report(params: ScoreParams) -> dict[str, Any] | None:
    """Run the flow (ephemeral server, or the one in PREFECT_API_URL); print a summary; None on failure.

    With the thread runner the shards run in this process, so the model loads
    on a thread while Prefect starts; planning and the shards find it loaded.
    """
    from flows.score import score

    if params.runner == "thread" and not params.dry_run:
        from tasks.infer_shard import warm_here

        warming = threading.Thread(target=warm_here, args=(params.to_spec(),), name="shardwise-warm")
        warming.daemon = True
        warming.start()
    with _shared_api(params):
        state = score(params, return_state=True)
    summary = state.result(raise_on_failure=False)
    if not isinstance(summary, dict):
        print(f"shardwise: run failed before any shard ran: {redact(str(summary))}")
        return None
    print(
        f"run {summary['run_id']} {'completed' if state.is_completed() else 'FAILED'}: "
        f"{summary['rows_out']} rows scored ({summary['inserted']} new, {summary['updated']} updated, "
        f"{summary['unchanged']} unchanged), {summary['rows_failed']} dead letters, "
        f"{summary['shards_done']}/{summary['shards_total']} shards done -> table {summary['results_table']}"
    )
    if not state.is_completed():
        print(f"shardwise: {redact(state.message or 'run failed')}")
        print(f"finish it later with: shardwise run ... --resume {summary['run_id']}")
        return None
    return summary


def print_plan(params: ScoreParams) -> None:
    """Print the shard count, rows per shard, estimated tokens and what --only-new would skip."""
    from tasks.dry_run import plan_report

    report = plan_report(params.to_spec(), params.fanout().workers)
    print(f"source {report['source']} (snapshot {report['snapshot']})")
    print(f"{report['shards']} shards, {report['rows']} rows to score")
    if report["shards"]:
        print(f"rows per shard: {report['rows_per_shard_min']} to {report['rows_per_shard_max']}")
    print(
        f"estimated tokens: {report['estimated_tokens']} ({report['tokens_per_row']} per row, "
        f"model {report['model']})"
    )
    verb = "skips" if report["only_new"] else "would skip"
    print(f"--only-new {verb} {report['rows_already_scored']} rows that already have a current result")


@contextmanager
def _shared_api(params: ScoreParams) -> Iterator[None]:
    """Without a server, give worker processes the flow's temporary API rather than one each.

    With no ``PREFECT_API_URL``, Prefect starts a temporary server for the
    flow, and every worker process it fans out to (process pool, Dask, Ray)
    would start one more of its own, at 20-30 s each. So the temporary server
    is started here and its URL exported, for the workers to inherit.
    """
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if params.runner == "thread" or PREFECT_API_URL.value():
        yield
        return
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        with temporary_settings({PREFECT_API_URL: server.api_url}):
            yield
    finally:
        os.environ.pop("PREFECT_API_URL", None)
