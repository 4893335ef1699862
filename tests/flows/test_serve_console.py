"""``shardwise serve`` prints one line per flow run when it ends; the detail stays in the run's log.

A bad run started as the UI or the API starts it (``run_deployment``) used to
print 192 lines and two tracebacks into the serve terminal.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest
from flow_data import make_docs
from serve_helpers import start, stop

from shardwise.flows.serve_console import run_line, runs_quiet_on_console

pytestmark = [pytest.mark.usefixtures("prefect_harness")]


def test_a_run_line_names_the_run_its_state_and_where_its_log_is() -> None:
    failed = run_line("ginger-wombat", "score/manual", "FAILED", "Flow run encountered\n an exception", "abc")
    assert failed == (
        "run ginger-wombat (score/manual) failed: Flow run encountered an exception; "
        "its log: prefect flow-run logs abc"
    )
    assert run_line("calm-cow", "score/nightly", "COMPLETED", "scored 5 rows", "x") == (
        "run calm-cow (score/nightly) completed: scored 5 rows"
    )


def test_run_logs_leave_the_console_and_children_inherit_it(caplog: pytest.LogCaptureFixture) -> None:
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()  # as serve has it: Prefect's logging set up before the block
    handler = logging.StreamHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with runs_quiet_on_console():
            assert os.environ["PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"] == "CRITICAL"
            kept = [
                handler.filter(logging.LogRecord(name, logging.ERROR, __file__, 1, "m", None, None))
                for name in ("prefect.flow_runs", "prefect.task_runs.x", "prefect.engine", "shardwise.serve")
            ]
            warning = logging.LogRecord("prefect.task_runs", logging.WARNING, "f", 1, "m", None, None)
            warned = handler.filter(warning)
        assert kept == [False, False, False, True]
        assert warned, "a run's warnings stay; its errors end in its one line"
        assert "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL" not in os.environ
        record = logging.LogRecord("prefect.flow_runs", logging.ERROR, __file__, 1, "m", None, None)
        assert handler.filter(record), "the filter goes with the block"
    finally:
        root.removeHandler(handler)


@pytest.mark.slow
def test_a_bad_run_from_the_api_is_one_line_in_the_serve_terminal(tmp_path: Path) -> None:
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL

    url = f"sqlite:///{tmp_path / 'source.db'}"
    make_docs(url, 10, bad=False)
    env = {**os.environ, "PREFECT_API_URL": str(PREFECT_API_URL.value()), "SHARDWISE_SOURCE_URL": url}
    env["PREFECT_LOGGING_TO_API_ENABLED"] = "true"  # as outside the tests: the runs log to the server
    serving, served = start(["serve", "--cold"], env)
    try:
        served.wait_for("Ctrl-C to stop", serving)
        bad = {
            "source": {"location": "env:SHARDWISE_SOURCE_URL", "table": "nosuch"},
            "model": {"name": "tiny"},
        }
        run = run_deployment("score/manual", parameters={"params": bad}, timeout=240)
        assert run.state is not None and run.state.is_failed()
        deadline = time.monotonic() + 60
        while f"run {run.name} (score/manual) failed" not in served.text() and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        stop(serving)
    out = served.text()
    about = [line for line in out.splitlines() if run.name in line or str(run.id) in line]
    assert len(about) == 1, out
    assert "table 'nosuch' not in schema 'main'" in about[0], about
    assert f"its log: prefect flow-run logs {run.id}" in about[0], about
    assert "Traceback" not in out and "Encountered exception" not in out, out
    assert len(out.splitlines()) <= 6, out  # serving, its run, the pause on stop
    assert "SourceError: table 'nosuch'" in _log_of(run.id), "the detail is in the flow run's own log"


def _log_of(flow_run_id: object) -> str:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    with get_client(sync_client=True) as client:
        logs = client.read_logs(LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])))
    return "\n".join(log.message for log in logs)
