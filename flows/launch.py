"""Start the score flow from the command line and report on it; preview a plan without running."""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from shardwise.cost.usage import dollars
from shardwise.errors import TransientError
from shardwise.flows.outcome import OK, RUN_FAILED, TAKEN_OVER, code_for, print_traceback, say_error
from shardwise.flows.params import ScoreParams
from shardwise.flows.resolved import check_resolved, hand_over, held_spec, resolve_run
from shardwise.flows.timeline import mark
from shardwise.flows.totals import closing_lines, source_changed
from shardwise.pipeline import RunSpec
from shardwise.pipeline.resume import resume_command
from shardwise.pipeline.run_result import RunResult
from shardwise.tasks.connections import resolve
from shardwise.words import plural

__all__ = [
    "Report",
    "TemporaryApi",
    "check_api",
    "finish_command",
    "preflight",
    "print_plan",
    "run_and_report",
    "was_recorded",
]


def preflight(params: ScoreParams) -> str | None:
    """Fail fast, before a flow run starts, on anything that can be checked now (see
    :func:`~shardwise.pipeline.check_run`), the cluster and the Prefect API included. The parameters are
    resolved once: the flow run that follows in this process reuses them (:mod:`flows.resolved`).

    Returns why the run would have nothing to do, when that is known already.
    """
    resolved = resolve_run(params)
    check_api(required=params.fanout.runner == "deployment")
    checked, idle = check_resolved(resolved, dry_run=params.run.dry_run)
    if idle is None:  # a flow run follows: it takes them, the model's description with them
        hand_over(params, checked)  # (see flows/resolved.py)
    return idle


def check_api(*, required: bool = False) -> None:
    """Make sure the Prefect API in ``PREFECT_API_URL`` answers; without one, a temporary server will do
    unless ``required`` (child flow runs need a server that a work pool's worker polls)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if not url:
        if required:
            from shardwise.flows.serving import require_server

            require_server()
        return
    import httpx

    try:
        httpx.get(f"{str(url).rstrip('/')}/health", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        raise TransientError(
            f"the Prefect API at {url} (PREFECT_API_URL) did not answer: {type(exc).__name__}: {exc}; start "
            "the server (prefect server start), or unset PREFECT_API_URL to run on a temporary one"
        ) from exc


@dataclass(frozen=True)
class Report:
    """How a run ended, for the command line: its exit code, and its result when it got that far."""

    code: int
    result: RunResult | None = None


def run_and_report(
    params: ScoreParams, *, progress: str = "none", progress_every: float = 10.0, verbose: bool = False
) -> Report:
    """Run the flow (on the server in PREFECT_API_URL, or a temporary one) and print how it ended.

    ``progress`` is how the run's progress shows on stderr meanwhile: ``bar``,
    ``lines`` (one every ``progress_every`` seconds), ``none``, or ``auto``
    (a bar on a terminal, else lines). An error that ends the flow is one
    line; its traceback is in the flow run's logs, and with ``verbose`` on
    stderr too. With the thread runner the shards run
    in this process, so the model loads on a thread while Prefect's server
    starts; planning and the shards find it loaded.

    The flow runs on a thread of its own (see :mod:`flows.interrupts`): under
    :func:`~flows.interrupts.stopping_on_signals` a SIGINT or SIGTERM then
    stops the command within seconds, with one line naming the run to resume.
    """
    api = TemporaryApi().start()  # first: the server's start is the longest step before the flow
    if params.fanout.runner == "thread" and not params.run.dry_run:
        from shardwise.tasks.infer_shard import warm_here

        warming = threading.Thread(target=_warm, args=(warm_here, held_spec(params)), name="shardwise-warm")
        warming.daemon = True
        warming.start()
    from shardwise.flows.interrupts import before_exit, note_flow_run, run_in_thread
    from shardwise.flows.progress_view import pick_mode, showing
    from shardwise.flows.score import score

    flow = score.with_options(on_running=[note_flow_run])  # its id, for the line a signal prints
    with api.serving(), before_exit(api.stop, late=True), showing(pick_mode(progress), progress_every):
        state = run_in_thread(lambda: flow(params, return_state=True))
    result = state.result(raise_on_failure=False)
    if not isinstance(result, RunResult):
        if verbose and isinstance(result, BaseException):
            print_traceback(result)
        say_error(result if isinstance(result, BaseException) else str(result))
        code = code_for(result) if isinstance(result, BaseException) else RUN_FAILED
        if code != TAKEN_OVER:  # the process that took it over finishes it: nothing to resume
            _say_how_to_finish(params, str(state.state_details.flow_run_id or ""))
        return Report(code)
    failed = not state.is_completed()
    for line in [*closing_lines(result, failed=failed), *result.finished]:
        print(line)
    if failed and result.stopped == "budget":  # not an error: the one line says what was spent, and how on
        print(state.message, file=sys.stderr)
        return Report(RUN_FAILED, result)
    if failed:
        say_error(state.message or "run failed")
        if not source_changed(state.message or ""):  # the error says to start a new run: a resume fails
            print(f"finish it later with: {finish_command(params, result.run_id)}", file=sys.stderr)
        return Report(RUN_FAILED, result)
    return Report(OK, result)


def _warm(warm_here: Callable[[RunSpec], None], spec: RunSpec) -> None:
    warm_here(spec)
    mark("model_ready")


def _say_how_to_finish(params: ScoreParams, run_id: str) -> None:
    """After a run that ended in an error: its id and how to finish it, if it got as far as the ledger.

    The run id is the flow run's id, or the resumed run's. If the ledger cannot be read (the
    database is the likely cause of the error), the hint is given anyway.
    """
    run_id = params.run.resume or run_id
    if not run_id or params.run.dry_run:
        return
    recorded = was_recorded(params, run_id)
    if recorded is False:
        return  # it failed before it was recorded: nothing to finish
    known = " (the ledger could not be read to check that it was recorded)" if recorded is None else ""
    print(f"run {run_id}{known}: finish it with: {finish_command(params, run_id)}", file=sys.stderr)


def finish_command(params: ScoreParams, run_id: str) -> str:
    """The command that resumes run ``run_id`` of ``params``, as it works when typed (see
    :func:`~shardwise.pipeline.resume.resume_command`)."""
    return resume_command(
        run_id, ledger=params.ledger, results=params.results.location, source=params.source.location
    )


def was_recorded(params: ScoreParams, run_id: str) -> bool | None:
    """Whether the ledger of ``params``'s run holds run ``run_id``; None when it cannot be read."""
    from shardwise.errors import ShardwiseError
    from shardwise.pipeline.destination import find_ledger
    from shardwise.results import Ledger

    try:
        found = find_ledger(
            params.ledger, params.results.location or params.source.location, params.source.location, resolve
        )
        with Ledger(found) as ledger:
            return ledger.load_run(run_id) is not None
    except ShardwiseError:
        return None


def print_plan(params: ScoreParams, *, as_json: bool = False) -> None:
    """Print the shard count, rows per shard, what --only-new would skip, what the run
    will cost; then the runs into the same results table still marked running: live, or abandoned (to
    resume instead). ``as_json``: the report as one JSON object, and nothing else."""
    from shardwise.models import get_spec
    from shardwise.pipeline import plan_report
    from shardwise.pipeline.home import calibration_cache, converted_cache
    from shardwise.tasks.connections import resolve

    workers = params.fanout_plan().workers
    report = plan_report(
        params.to_spec(),
        get_spec,
        resolve,
        workers,
        calibration=calibration_cache(),
        converted=converted_cache(),
    )
    if as_json:
        print(json.dumps(report))
        return
    print(f"source {report['source']} (snapshot {report['snapshot']})")
    print(f"{plural(report['shards'], 'shard')}, {plural(report['rows'], 'row')} to score")
    if report["shards"]:
        print(f"rows per shard: {report['rows_per_shard_min']} to {report['rows_per_shard_max']}")
    verb = "skips" if report["only_new"] else "would skip"
    skipped, read = report["rows_already_scored"], report["rows_already_read"]
    if skipped is None:
        print(f"--only-new {verb} an unknown number of rows ({report['rows_already_scored_unknown']})")
    elif read:
        print(f"--only-new {verb} {plural(read, 'row')} in files a completed run already read (scored or "
              "dead-lettered)")  # fmt: skip
    else:
        have = "has" if skipped == 1 else "have"
        print(f"--only-new {verb} {plural(skipped, 'row')} that already {have} a current result")
    nulls = int(report.get("rows_null_key") or 0)
    if nulls:
        print(f"{plural(nulls, 'row')} with a NULL key {'is' if nulls == 1 else 'are'} skipped: not scored")
    bad = int(report.get("rows_unparsable") or 0)
    if bad:
        print(f"{plural(bad, 'unparsable line')} {'is' if bad == 1 else 'are'} skipped: not scored")
    for line in cost_lines(report):
        print(line)
    for line in report.get("unfinished_runs", []):
        print(line)


def cost_lines(report: Mapping[str, Any]) -> list[str]:
    """What the plan says the run will cost: its tokens, device-hours and dollars (unknown where so)."""
    prompt, cap = report.get("prompt_tokens"), report.get("max_completion_tokens")
    lines = []
    if prompt is None:
        lines.append(f"prompt tokens: unknown ({report['prompt_tokens_counted']})")
    else:
        bound = "" if cap is None else f"; completion tokens: at most {cap:,}"
        lines.append(f"prompt tokens: {prompt:,} ({report['prompt_tokens_counted']}){bound}")
    hours, low, high = (
        report.get("device_hours"),
        report.get("device_hours_low"),
        report.get("device_hours_high"),
    )
    if hours is not None:
        lines.append(
            f"device-hours: about {hours:.4f} ({low:.4f} to {high:.4f}; from {report['device_hours_from']})"
        )
    elif report.get("device_hours_from"):
        lines.append(f"device-hours: {report['device_hours_from']}")
    cost_low, cost_high = report.get("cost_usd_low"), report.get("cost_usd_high")
    if cost_low is None or cost_high is None:
        lines.append(f"cost: unknown ({report['cost_basis']})")
    else:
        lines.append(f"cost: {dollars(cost_low)} to {dollars(cost_high)} ({report['cost_basis']})")
    return lines + budget_lines(report)


_COVERS = {
    "yes": "covers the estimate",
    "no": "does not cover the estimate: the run stops when it is spent",
    "perhaps": "may not cover the estimate: the run stops if it is spent",
    None: "is not compared: the estimate is unknown",
}


def budget_lines(report: Mapping[str, Any]) -> list[str]:
    """Each budget given and whether it covers the estimate, then the chunk the run cuts for them."""
    lines = []
    if report.get("budget_usd") is not None:
        lines.append(f"budget {dollars(report['budget_usd'])} {_COVERS[report['budget_usd_covers']]}")
    if report.get("budget_tokens") is not None:
        lines.append(f"budget {report['budget_tokens']:,} tokens {_COVERS[report['budget_tokens_covers']]}")
    rows = report.get("budget_chunk_rows")
    if rows is not None:
        lines.append(
            f"chunks of {plural(rows, 'row')}, each at most a tenth of the budget at the high estimate"
        )
    return lines


class TemporaryApi:
    """Prefect's temporary server for one CLI run, started first, when no server is set.

    Without ``PREFECT_API_URL`` Prefect would start a temporary server when
    the flow first calls its API, and every worker process of a process pool,
    Dask or Ray would start one more of its own (20-30 s each). Started here,
    before the model loads and the flow modules import, the server imports
    Prefect and builds its database in its own process meanwhile (3-9 s on 2
    cores), and its URL is exported for the flow and for every worker to
    share. :class:`~flows.temp_server.TemporaryServer` starts it without
    importing Prefect's server into this process, and stops it at exit.
    """

    def __init__(self) -> None:
        self._server: Any = None
        self._error: Exception | None = None

    def stop(self) -> None:
        """Stop the temporary server now, if this started one (an exit handler does it otherwise)."""
        if self._server is not None:
            self._server.stop()

    def start(self) -> TemporaryApi:
        from prefect.settings import PREFECT_API_URL

        if PREFECT_API_URL.value():
            from shardwise.flows.temp_server import discard_early

            discard_early()
            return self  # a server is set: use it
        try:
            self._server = _new_server()
        except Exception as exc:  # reported by serving(), as one line and exit 3
            self._error = exc
        return self

    @contextmanager
    def serving(self) -> Iterator[None]:
        """Wait for the server, then point Prefect (and worker processes) at it; no heartbeat to a server
        that dies with this process."""
        if self._server is None and self._error is None:
            yield
            return
        from prefect.settings import (
            PREFECT_API_URL,
            PREFECT_FLOWS_HEARTBEAT_FREQUENCY,
            PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
            temporary_settings,
        )

        timeout = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
        try:
            if self._error is not None:
                raise self._error
            self._server.wait(timeout)
        except Exception as exc:
            error = TransientError(
                f"Prefect's temporary server did not start ({type(exc).__name__}: {exc}); the machine may "
                f"be too busy to start it within {timeout} s: raise "
                "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, or start one (prefect server start) "
                "and export PREFECT_API_URL"
            )
            raise error from exc
        mark("server_up")
        url = self._server.api_url
        os.environ["PREFECT_API_URL"] = url  # for worker processes
        updates = {PREFECT_API_URL: url, PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}
        try:
            with temporary_settings(updates), _process_wide():
                yield
        finally:
            os.environ.pop("PREFECT_API_URL", None)


@contextmanager
def _process_wide() -> Iterator[None]:
    """Make this thread's Prefect settings the process-wide ones while the block runs.

    ``temporary_settings`` reaches this thread's context only. Prefect's own
    threads (the process pool's message forwarder, the events worker) read
    the process-wide settings, built when Prefect was imported: without the
    server's URL there, each started another temporary server of its own,
    unguarded, that outlived a killed run.
    """
    import prefect.context

    prior = prefect.context.GLOBAL_SETTINGS_CONTEXT
    prefect.context.GLOBAL_SETTINGS_CONTEXT = prefect.context.get_settings_context()
    try:
        yield
    finally:
        prefect.context.GLOBAL_SETTINGS_CONTEXT = prior


def _new_server() -> Any:
    """The temporary server started before the command line was parsed, else a new one (a seam for tests)."""
    from shardwise.flows.temp_server import TemporaryServer, take_early

    return take_early() or TemporaryServer().launch()
