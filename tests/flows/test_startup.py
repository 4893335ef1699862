"""The command line sets Prefect's defaults before Prefect is imported, and a temporary server that does not
start is one line and exit 3, even on a machine whose every core is busy."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardwise.environment import LOCAL_PREFECT
from shardwise.errors import TransientError
from shardwise.flows.outcome import UNAVAILABLE, code_for

_PREFECT_VARIABLES = ("PREFECT_API_URL", "PREFECT_HOME", *LOCAL_PREFECT)


def _clean_env(home: Path) -> dict[str, str]:
    """This environment without any Prefect setting the CLI sets itself, and a Prefect home of its own."""
    env = {k: v for k, v in os.environ.items() if k not in _PREFECT_VARIABLES}
    return {**env, "PREFECT_HOME": str(home)}


def test_the_parser_imports_no_prefect_and_prefect_settings_are_in_force_after(tmp_path: Path) -> None:
    """--help and usage errors cost no Prefect import (it took 0.8 s of the 3 s before the help showed);
    a run's Prefect import, later, still sees the settings the CLI sets first."""
    probe = (
        "import sys; import shardwise.flows.cli as cli; cli._parser(); assert 'prefect' not in sys.modules; "
        "from prefect.settings import get_current_settings as s; "
        "print(s().server.ephemeral.startup_timeout_seconds, s().server.analytics_enabled)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=_clean_env(tmp_path), capture_output=True, text=True, check=True
    )
    timeout = LOCAL_PREFECT["PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"]
    assert done.stdout.split() == [timeout, "False"], done.stdout + done.stderr


def _on_a_terminal(argv: list[str], env: dict[str, str]) -> str:
    """What ``argv`` prints with stdout and stderr on a pseudo-terminal, as a user at a terminal sees it."""
    import pty

    leader, follower = pty.openpty()
    with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=follower, stderr=follower, env=env) as proc:
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal closed: every writer exited
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=120)
    os.close(leader)
    return out.decode(errors="replace")


def test_a_first_run_on_a_terminal_prints_no_telemetry_notice(tmp_path: Path) -> None:
    """Prefect prints its telemetry notice when it is imported on a terminal with a new Prefect home,
    unless DO_NOT_TRACK is set (its analytics setting does not stop it); CI variables would hide it."""
    from prefect._internal.analytics.ci_detection import CI_ENV_VARS

    env = {k: v for k, v in _clean_env(tmp_path).items() if k not in CI_ENV_VARS}
    shown = _on_a_terminal([sys.executable, "-m", "shardwise.flows.cli", "runs", "--help"], env)
    assert "usage: shardwise runs" in shown, shown
    assert "anonymous usage data" not in shown and "telemetry" not in shown.lower(), shown


def test_a_temporary_server_that_does_not_start_is_a_service_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from shardwise.flows import launch

    class NeverStarts:
        def wait(self, timeout_s: float) -> None:
            raise RuntimeError(f"the server did not answer within {timeout_s:g} s")

    monkeypatch.setattr(launch, "_new_server", NeverStarts)
    with temporary_settings({PREFECT_API_URL: None}):
        api = launch.TemporaryApi().start()
        with pytest.raises(TransientError) as caught, api.serving():
            pass
    assert code_for(caught.value) == UNAVAILABLE
    message = str(caught.value)
    assert "\n" not in message and "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS" in message, message


def test_every_thread_sees_the_temporary_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's own threads read the process-wide settings: each started a server of its own before."""
    import threading

    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    from shardwise.flows import launch

    class Started:
        api_url = "http://127.0.0.1:9/api"

        def wait(self, timeout_s: float) -> None:
            pass

    def seen_by_a_new_thread() -> str | None:
        seen: list[str | None] = []
        thread = threading.Thread(target=lambda: seen.append(get_current_settings().api.url))
        thread.start()
        thread.join()
        return seen[0]

    monkeypatch.setattr(launch, "_new_server", Started)
    before = seen_by_a_new_thread()
    with temporary_settings({PREFECT_API_URL: None}):
        api = launch.TemporaryApi().start()
        with api.serving():
            assert seen_by_a_new_thread() == Started.api_url
            assert os.environ["PREFECT_API_URL"] == Started.api_url
    assert seen_by_a_new_thread() == before, "the process-wide settings are restored"
    assert "PREFECT_API_URL" not in os.environ


def _spin(stop_at: float) -> None:
    while time.monotonic() < stop_at:
        pass


@pytest.fixture
def every_core_busy() -> Iterator[None]:
    """One busy-looping process per core, for as long as the test runs (10 minutes at most)."""
    spinners = [
        multiprocessing.get_context("spawn").Process(
            target=_spin, args=(time.monotonic() + 600,), daemon=True
        )
        for _ in range(os.cpu_count() or 1)
    ]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


@pytest.mark.slow
def test_the_demo_completes_with_every_core_busy(tmp_path: Path, every_core_busy: None) -> None:
    """A cold Prefect home (the server builds its database first), as on a user's first run."""
    started = time.monotonic()
    demo = [
        "demo",
        "--rows",
        "300",
        "--model",
        "tiny",
        "--workdir",
        str(tmp_path / "work"),
        "--progress",
        "none",
    ]
    done = subprocess.run(
        [sys.executable, "-m", "shardwise.flows.cli", *demo],
        env=_clean_env(tmp_path / "prefect-home"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    took = time.monotonic() - started
    assert done.returncode == 0, f"after {took:.0f} s:\n{done.stdout}\n{done.stderr}"
    runs = 2 + ("ImageNet class" in done.stdout) + ("summary of row" in done.stdout)  # where installed:
    # MobileNetV2's weights (the test command installs them) and SmolLM2
    assert done.stdout.count(" completed: ") == runs and "Traceback" not in done.stderr, (
        done.stdout + done.stderr
    )
    print(f"demo with every core busy: {took:.0f} s")
