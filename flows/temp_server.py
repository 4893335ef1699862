"""Prefect's temporary server as a child process, started without importing Prefect's server here.

Prefect's own :class:`~prefect.server.api.server.SubprocessASGIServer`
lives in ``prefect.server.api.server``, whose import builds the server's
models and routes: 2-3 s of CPU on two cores, paid by the command line only
to start a process that imports all of it again. This starts the same
command (uvicorn on Prefect's app factory, loopback only, the UI off, the
server marked ephemeral) with the same settings, from the module's name
alone, and waits for ``/api/health``. A guard process (:mod:`flows.server_guard`)
stops the server if the command is killed; an exit handler stops it otherwise.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

__all__ = ["TemporaryServer", "discard_early", "start_early", "take_early"]

_PORT_IN_USE = 3
"""uvicorn's exit status when its port was taken between choosing and binding it."""
_POLL_S = 0.1
_STOP_S = 5.0


class TemporaryServer:
    """One temporary Prefect server: :meth:`launch` starts it, :meth:`wait` blocks until it answers."""

    def __init__(self) -> None:
        self.answered = False
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.guard: subprocess.Popen[bytes] | None = None
        self._settings = True
        self._stopping_at_exit = False

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def launch(self, settings: bool = True) -> TemporaryServer:
        """Start the server's process (and its guard), and stop both at exit; returns at once.

        With ``settings`` the server gets this process's Prefect settings as
        environment variables (as Prefect's own does); without, only the
        environment, which is all there is before anything changed a setting here.
        """
        self.port = _free_port()
        self.process = subprocess.Popen(
            _command(self.port), env=_environment(settings), stdin=subprocess.DEVNULL
        )
        guard = [
            sys.executable,
            "-m",
            "shardwise.flows.server_guard",
            str(os.getpid()),
            str(self.process.pid),
        ]
        self.guard = subprocess.Popen(guard, stdin=subprocess.DEVNULL)
        if not self._stopping_at_exit:
            atexit.register(self.stop)
            self._stopping_at_exit = True
        self._settings = settings
        return self

    def wait(self, timeout_s: float) -> None:
        """Block until the server answers ``/api/health``; a RuntimeError after ``timeout_s`` or its exit."""
        import httpx

        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=5) as client:
            while time.monotonic() < deadline:
                assert self.process is not None
                code = self.process.poll()
                if code == _PORT_IN_USE:
                    self.launch(self._settings)  # another process took the port first: another one
                    continue
                if code is not None:
                    raise RuntimeError(f"the server's process exited with status {code}")
                try:
                    if client.get(f"{self.api_url}/health").status_code == 200:
                        self.answered = True
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(_POLL_S)
        raise RuntimeError(f"the server did not answer within {timeout_s:g} s")

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s, or 1 s for one that never answered: nothing
        used it); the guard then ends by itself."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=_STOP_S if self.answered else 1.0)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(port: int) -> list[str]:
    """Prefect's own command for its temporary server (``SubprocessASGIServer._run_uvicorn_command``)."""
    spec = importlib.util.find_spec("prefect")
    assert spec is not None and spec.origin is not None
    app_dir = Path(spec.origin).parent.parent
    return [
        *(sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir)),
        *("--factory", "prefect.server.api.server:create_app"),
        *("--host", "127.0.0.1", "--port", str(port), "--log-level", "error", "--lifespan", "on"),
    ]


def _environment(settings: bool) -> dict[str, str]:
    """This process's environment (and Prefect settings), the UI off, marked ephemeral."""
    ephemeral = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1"}
    if not settings:
        return {**os.environ, **ephemeral}
    from prefect.settings import get_current_settings

    return {**os.environ, **ephemeral, **get_current_settings().to_environment_variables(exclude_unset=True)}


_early: TemporaryServer | None = None
_STARTS_A_SERVER = {"run", "redrive"}
_NO_SERVER_FLAGS = {"-h", "--help"}
_SETTINGS_FILES = (".env", "prefect.toml", "pyproject.toml")
_SETTINGS_BYTES = 1 << 20
_API_URL = re.compile(r"(?i)api[._]?url|\[(tool\.prefect\.)?api\][^\[]*?\burl\s*=")
"""PREFECT_API_URL, api.url, or a url key in an [api] table: a server may be named there."""


def start_early(argv: Sequence[str]) -> None:
    """Start the temporary server before the command line is even parsed, where ``argv`` will surely need
    one: ``run`` or ``redrive`` (a dry run too: its flow runs on the server), not ``--help``, and no Prefect
    API URL set anywhere Prefect reads one.

    Parsing imports Prefect and torch (2-5 s on two cores); the server
    starts meanwhile in its own process. :func:`take_early` hands it over;
    a command that turns out not to need it (a usage error, an API URL in a
    place not checked here) stops it at exit, or by :func:`discard_early`.
    """
    global _early
    if not argv or argv[0] not in _STARTS_A_SERVER or _NO_SERVER_FLAGS & set(argv):
        return
    if any(name.startswith("PREFECT_API_URL") for name in os.environ) or _api_url_in_settings_files():
        return
    _early = TemporaryServer().launch(settings=False)


def take_early() -> TemporaryServer | None:
    """The server :func:`start_early` started, once; None if it started none."""
    global _early
    found, _early = _early, None
    return found


def discard_early() -> None:
    """Stop the server :func:`start_early` started, if any: a server is set after all."""
    found = take_early()
    if found is not None:
        found.stop()


def _api_url_in_settings_files() -> bool:
    """Whether a file Prefect reads its settings from (here, or its profiles) may name an API URL."""
    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    profiles = os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml"
    from shardwise.bounded_read import read_regular_file
    from shardwise.errors import ConfigError

    for path in (*map(Path, _SETTINGS_FILES), Path(profiles).expanduser()):
        try:  # a regular file only, and not all of a huge one: a FIFO here must not hold the command
            text = read_regular_file(path, what="the settings file", max_bytes=_SETTINGS_BYTES)
        except ConfigError:
            continue
        if _API_URL.search(text.decode("utf-8", errors="replace")):
            return True
    return False
