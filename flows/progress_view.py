"""The run's live progress on the terminal while the CLI runs the flow: a bar, plain lines, or nothing.

:func:`showing` registers a listener for the snapshots the flow publishes
(:mod:`tasks.progress`). ``bar`` is a rich progress bar on stderr that other
output (prints, Prefect's log lines) scrolls above; ``lines`` prints a short
line at most every ``every_s`` seconds and a last one at the end, for logs
and CI, where a redrawn bar would be noise.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal, TextIO, get_args

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from shardwise.errors import ConfigError
from shardwise.flows.interrupts import before_exit
from shardwise.pipeline import ProgressReading
from shardwise.tasks.progress import describe, listening

__all__ = ["ProgressMode", "pick_mode", "progress_line", "showing"]

ProgressMode = Literal["auto", "bar", "lines", "none"]


def pick_mode(requested: str, stream: TextIO | None = None) -> str:
    """``requested`` as a concrete mode: ``auto`` is ``bar`` on a terminal and ``lines`` elsewhere."""
    if requested not in get_args(ProgressMode):
        raise ConfigError(
            f"progress display must be one of {', '.join(get_args(ProgressMode))}; got {requested!r}"
        )
    if requested != "auto":
        return requested
    isatty = getattr(stream or sys.stderr, "isatty", None)
    return "bar" if isatty is not None and isatty() else "lines"


@contextmanager
def showing(mode: str, every_s: float = 1.0, *, stream: TextIO | None = None) -> Iterator[None]:
    """Show the progress of runs in this process on ``stream`` (stderr) while the block runs.

    ``every_s`` paces the ``lines`` mode; the bar redraws as snapshots come.
    """
    if every_s <= 0:
        raise ConfigError(f"progress interval must be a positive number of seconds; got {every_s!r}")
    mode = pick_mode(mode, stream)
    if mode == "none":
        yield
        return
    view = _Lines(stream, every_s) if mode == "lines" else _Bar(stream)
    asked = every_s if mode == "lines" else None  # each line a fresh reading of the ledger
    try:
        # A signal's line then prints below the bar.
        with listening(view.show, asked), before_exit(view.close):
            yield
    finally:
        view.close()


def progress_line(snapshot: ProgressReading) -> str:
    """``progress: 3/10 shards, 12,000/20,000 rows, 850 rows/s, ETA 9 s, 4 dead letters``."""
    return "progress: " + describe(snapshot, speed=True)


class _Lines:
    """Plain lines: one per ``every_s`` seconds of the run at most, and the final one."""

    def __init__(self, stream: TextIO | None, every_s: float) -> None:
        self._stream, self._every_s = stream, every_s
        self._lock = threading.Lock()
        self._last: tuple[str, float] | None = None  # (run id, elapsed seconds) of the last line

    def show(self, snapshot: ProgressReading) -> None:
        with self._lock:
            last = self._last
            due = last is None or last[0] != snapshot.run_id or snapshot.elapsed_s - last[1] >= self._every_s
            if not (due or snapshot.final):
                return
            self._last = (snapshot.run_id, snapshot.elapsed_s)
            stream = self._stream or sys.stderr  # looked up now: stderr may be redirected meanwhile
            print(progress_line(snapshot), file=stream, flush=True)

    def close(self) -> None:
        pass


class _Bar:
    """A rich progress bar, started at the first snapshot; prints and log lines scroll above it."""

    def __init__(self, stream: TextIO | None) -> None:
        console = Console(file=stream) if stream is not None else Console(stderr=True)
        self._progress = Progress(
            TextColumn("[bold]scoring"),
            BarColumn(bar_width=20),  # the counts beside it fit an 80-column terminal
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("{task.fields[detail]}"),
            console=console,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self._lock = threading.Lock()
        self._task: TaskID | None = None
        self._undo: Callable[[], None] = lambda: None

    def show(self, snapshot: ProgressReading) -> None:
        with self._lock:
            if self._task is None:
                self._progress.start()
                self._undo = _logs_through_stderr()
                self._task = self._progress.add_task("scoring", total=100.0, detail="")
            self._progress.update(
                self._task, completed=snapshot.percent, detail=describe(snapshot, speed=True)
            )

    def close(self) -> None:
        with self._lock:
            if self._task is not None:
                self._undo()
                self._progress.stop()


def _logs_through_stderr() -> Callable[[], None]:
    """Point log handlers that write to the real stderr at ``sys.stderr`` now (the bar's proxy).

    rich redirects ``sys.stderr``, but a handler keeps the stream it was
    made with, and Prefect's console handler its own rich console: their
    lines would tear through the bar. Returns the function that undoes this.
    """
    proxy = sys.stderr
    real = getattr(proxy, "rich_proxied_file", None)
    if real is None:
        return lambda: None  # not a terminal: rich redirected nothing
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    moved: list[logging.StreamHandler[TextIO]] = []
    for logger in loggers:
        for handler in getattr(logger, "handlers", ()):
            if isinstance(handler, logging.StreamHandler) and handler.stream is real:
                handler.setStream(proxy)
                console = getattr(handler, "console", None)
                if isinstance(console, Console):
                    console.file = proxy
                moved.append(handler)

    def undo() -> None:
        for handler in moved:
            handler.setStream(real)
            console = getattr(handler, "console", None)
            if isinstance(console, Console):
                console.file = real

    return undo
