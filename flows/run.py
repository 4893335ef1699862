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

__all__ = ["TemporaryApi", "preflight", "print_plan", "run_and_report"]


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
    """Run the flow (on the server in PREFECT_API_URL, or a temporary one); print a summary; None on failure.

    With the thread runner the shards run in this process, so the model loads
    on a thread while Prefect's server starts; planning and the shards find it
    loaded.
    """
    if params.runner == "thread" and not params.dry_run:
        from tasks.infer_shard import warm_here

        warming = threading.Thread(target=warm_here, args=(params.to_spec(),), name="shardwise-warm")
        warming.daemon = True
        warming.start()
    api = TemporaryApi().start()
    from flows.score import score

    with api.serving():
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


class TemporaryApi:
    """Prefect's temporary server for one CLI run, started early, on a thread, when no server is set.

    Without ``PREFECT_API_URL`` Prefect would start a temporary server when
    the flow first calls its API, and every worker process of a process pool,
    Dask or Ray would start one more of its own (20-30 s each). Started here,
    before the model loads and the flow modules import, the server builds its
    database in its own process meanwhile (3-9 s on 2 cores), and its URL is
    exported for the flow and for every worker to share. Prefect's own
    :class:`~prefect.server.api.server.SubprocessASGIServer` runs it and
    stops it at exit.
    """

    def __init__(self) -> None:
        self._url: str | None = None
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> TemporaryApi:
        from prefect.settings import PREFECT_API_URL

        if PREFECT_API_URL.value():
            return self  # a server is set: use it
        from prefect.server.api.server import SubprocessASGIServer  # imported here, not on the thread

        server = SubprocessASGIServer()
        self._thread = threading.Thread(target=self._run, args=(server,), name="shardwise-api", daemon=True)
        self._thread.start()
        return self

    def _run(self, server: Any) -> None:
        try:
            server.start()
            self._url = server.api_url
        except BaseException as exc:  # reported by serving(), in the caller's thread
            self._error = exc

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Wait for the server, then point Prefect (and worker processes) at it; no heartbeat to a server
        that dies with this process."""
        if self._thread is None:
            yield
            return
        from prefect.settings import PREFECT_API_URL, PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._url is not None
        os.environ["PREFECT_API_URL"] = self._url
        try:
            with temporary_settings({PREFECT_API_URL: self._url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
                yield
        finally:
            os.environ.pop("PREFECT_API_URL", None)
