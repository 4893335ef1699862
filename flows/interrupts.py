"""Stop ``shardwise run`` within seconds on SIGINT (Ctrl-C) or SIGTERM, with one line saying how to finish.

A scoring command used to die badly on a signal. Ctrl-C raised
``KeyboardInterrupt`` wherever the main thread was, inside Prefect's engine,
and printed a 46-line traceback without the run's id (exit 1). SIGTERM was
turned by Prefect's handler into an exception that unwound the flow and then
waited for the task runner's threads: a worker thread blocked in a read (a
FIFO named by a row) never returns, so the process outlived SIGTERM for as
long as anyone cared to watch, and only SIGKILL ended it.

While :func:`stopping_on_signals` is active, the flow runs on its own thread
(:func:`run_in_thread`), where Prefect cannot install its SIGTERM handler,
and SIGINT and SIGTERM only *note* the request: nothing is raised into
Prefect or into the engine. A stopper thread then, within :data:`STOP_S`
seconds whatever else is blocked:

1. releases the leases of the runs this process holds (:func:`hold`), so
   the run shows as abandoned at once and ``--resume`` may take it from any
   host (on this host it may anyway: the process is gone);
2. marks the flow run Crashed, with the reason, when its id is known;
3. prints **one** line on stderr: the signal, the run's id, and
   ``shardwise run ... --resume RUN_ID``;
4. stops Prefect's temporary server, and ends the process with
   :data:`~flows.outcome.SIGINT_EXIT` (130) or :data:`~flows.outcome.SIGTERM_EXIT`
   (143): 128 + the signal's number, what a shell reports for a program killed by it.

Ending the process at once is safe because the ledger is: every chunk
commits in one transaction with its results, so the chunk a blocked or
running worker had not committed is simply not there, and a resume scores
it (as after SIGKILL, which the kill-point tests check). Worker processes die
with this one (:mod:`shardwise.process.lifeline`, :mod:`shardwise.process.reaper`), and the
temporary server's guard stops it if step 4 had no time to. A second signal
while stopping ends the process at once, after the line. What cannot be
done within :data:`STOP_S` (a database that does not answer) is skipped:
the run's lease then expires by itself.
"""

from __future__ import annotations

import contextvars
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType
from typing import Any, TypeVar

from shardwise.flows.outcome import SIGINT_EXIT, SIGTERM_EXIT

__all__ = [
    "STOP_S",
    "before_exit",
    "hold",
    "let_go",
    "note_flow_run",
    "run_in_thread",
    "stopping_on_signals",
]

STOP_S = 5.0
"""The most seconds from the signal to the end of the process, whatever is blocked."""
_STEP_S = 2.0
"""The most seconds one clean-up step (the lease, the flow run's state) may take."""

T = TypeVar("T")

_lock = threading.Lock()
_held: list[Any] = []  # PlannedRun, whose lease this process holds
_cleanups: list[tuple[Callable[[], None], bool]] = []
_flow_run: list[str] = []
_stopper: _Stopper | None = None


@contextmanager
def stopping_on_signals(
    resume: str | None, recorded: Callable[[str], bool | None], finish: Callable[[str], str]
) -> Iterator[None]:
    """While the block runs in the main thread, SIGINT and SIGTERM stop the command (see the module).

    ``resume`` is the run being resumed, if any: its id is the one to resume again.
    ``recorded(run_id)`` says, from the ledger, whether a run that this process does not hold (yet)
    was recorded: True, False, or None when the ledger cannot tell. ``finish(run_id)`` is the command
    that resumes it, as it works when typed. Outside the main thread it does nothing.
    """
    global _stopper
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    stopper = _Stopper(resume, recorded, finish)
    previous = {sig: signal.signal(sig, stopper.request) for sig in (signal.SIGINT, signal.SIGTERM)}
    _stopper = stopper
    try:
        yield
    finally:
        _stopper = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        with _lock:
            _flow_run.clear()


def run_in_thread(call: Callable[[], T]) -> T:
    """``call()`` on a thread of its own, waited for here; its result, or its exception raised here.

    While :func:`stopping_on_signals` is active, the main thread only waits, so a signal never lands
    inside Prefect's engine, and Prefect installs no SIGTERM handler of its own (it can only from the
    main thread). Elsewhere, ``call`` runs in this thread.
    """
    if _stopper is None:
        return call()
    # Ray, started on the flow's thread, warns that it could not set its SIGTERM handler there: this
    # command handles SIGTERM itself, so the warning would only be noise on the terminal.
    logging.getLogger("ray._private.worker").addFilter(_no_ray_sigterm_warning)
    context = contextvars.copy_context()  # Prefect's settings (the temporary server's URL) go along
    box: list[tuple[bool, Any]] = []

    def target() -> None:
        try:
            box.append((True, context.run(call)))
        except BaseException as exc:
            box.append((False, exc))

    thread = threading.Thread(target=target, name="shardwise-flow")
    thread.start()
    while thread.is_alive():
        thread.join(0.5)  # short waits: the signal handler runs between them
    ok, value = box[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _no_ray_sigterm_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("SIGTERM handler is not set because current thread")


def note_flow_run(flow: Any, flow_run: Any, state: Any) -> None:
    """A Prefect ``on_running`` hook: remember the flow run's id, a new run's id, for the line."""
    with _lock:
        _flow_run[:] = [str(flow_run.id)]


def hold(planned: Any) -> None:
    """From now until :func:`let_go`, ``planned`` (a :class:`~shardwise.pipeline.PlannedRun`) is a run this
    process holds: a signal releases its lease and names it in the line."""
    with _lock:
        _held.append(planned)


def let_go(planned: Any) -> None:
    """``planned`` is no longer held (see :func:`hold`)."""
    with _lock:
        if planned in _held:
            _held.remove(planned)


@contextmanager
def before_exit(cleanup: Callable[[], None], *, late: bool = False) -> Iterator[None]:
    """While the block runs, a signal calls ``cleanup`` before its line (a progress bar stops drawing),
    or with ``late`` after it (the temporary server stops), each within a couple of seconds."""
    entry = (cleanup, late)
    with _lock:
        _cleanups.append(entry)
    try:
        yield
    finally:
        with _lock:
            _cleanups.remove(entry)


class _Stopper:
    """What a signal sets going: the steps of the module's docstring, on a thread of their own."""

    def __init__(
        self, resume: str | None, recorded: Callable[[str], bool | None], finish: Callable[[str], str]
    ) -> None:
        self._resume, self._recorded, self._finish = resume, recorded, finish
        self._signum = 0
        self._said = threading.Lock()
        self._printed = False
        self._line = ""

    def request(self, signum: int, frame: FrameType | None) -> None:
        """The signal handler: start stopping, or, when already stopping, end the process now."""
        if self._signum:
            self._end()
        self._signum = signum
        # said if the deadline comes first
        self._line = _line(self._reason, self._resume, recorded=None, finish=self._finish)
        context = contextvars.copy_context()  # Prefect's settings, for the flow run's state
        stopping = threading.Thread(
            target=context.run, args=(self._stop,), name="shardwise-stop", daemon=True
        )
        stopping.start()
        deadline = threading.Timer(STOP_S, self._end)
        deadline.daemon = True
        deadline.start()

    @property
    def _reason(self) -> str:
        return f"interrupted by {signal.Signals(self._signum).name}"

    @property
    def code(self) -> int:
        return SIGINT_EXIT if self._signum == signal.SIGINT else SIGTERM_EXIT

    def _stop(self) -> None:
        with _lock:
            held, cleanups = list(_held), list(_cleanups)
            flow_run = _flow_run[0] if _flow_run else None
        run_id = held[0].ref.run_id if held else self._resume or flow_run
        known = True if held or self._resume else None
        self._line = _line(self._reason, run_id, recorded=known, finish=self._finish)
        for planned in held:
            _within(_STEP_S, lambda p=planned: _release(p))
        if flow_run is not None:
            _within(_STEP_S, lambda: _crash_flow_run(flow_run, self._reason, run_id))
        for cleanup, late in cleanups:
            if not late:
                _within(_STEP_S, cleanup)
        if run_id is not None and not held and not self._resume:
            found = _within(_STEP_S, lambda: self._recorded(run_id))
            self._line = _line(self._reason, run_id, recorded=found, finish=self._finish)
        self._say()
        for cleanup, late in cleanups:
            if late:
                _within(_STEP_S, cleanup)
        self._end()

    def _say(self) -> None:
        """Print the line once, whichever thread gets here first (the stopper, the deadline, a signal);
        a thread that comes second waits (a moment at most) until it is out, so the exit never cuts it."""
        if not self._said.acquire(timeout=1.0):
            return
        try:
            if not self._printed:
                with suppress(OSError, ValueError):  # stderr closed: the exit code still says it
                    print(f"shardwise: {self._line}", file=sys.__stderr__ or sys.stderr, flush=True)
                self._printed = True
        finally:
            self._said.release()

    def _end(self) -> None:
        self._say()
        _within(_STEP_S / 2, _release_named_semaphores)
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()
        os._exit(self.code)


def _line(reason: str, run_id: str | None, *, recorded: bool | None, finish: Callable[[str], str]) -> str:
    """The one line a signal prints: what became of the run, and how to finish it (``finish(run_id)``).

    ``recorded`` is whether the ledger holds the run; None when that is not known (yet).
    """
    if run_id is None:
        return f"{reason} before the run started: nothing was recorded; run the command again"
    if recorded is False:
        return f"{reason} before run {run_id} was recorded: nothing to resume; run the command again"
    unsure = " (if it was recorded: the ledger was not read)" if recorded is None else ""
    return (
        f"{reason}: run {run_id} stopped{unsure}; what it committed stays committed; finish it with: "
        f"{finish(run_id)}"
    )


def _within(seconds: float, step: Callable[[], Any], default: Any = None) -> Any:
    """``step()``'s result if it ends within ``seconds`` (on a daemon thread), else ``default``; an error
    it raises counts as ``default`` too: stopping goes on whatever fails."""
    box: list[Any] = []

    def target() -> None:
        try:
            box.append(step())
        except Exception:
            box.append(default)

    thread = threading.Thread(target=target, name="shardwise-stop-step", daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(max(0.0, seconds - (time.monotonic() - started)))
    return box[0] if box else default


def _release_named_semaphores() -> None:
    """Unlink the named semaphores a process pool made here, as a normal exit does.

    ``os._exit`` skips ``multiprocessing``'s exit handler, so its resource tracker would find them
    at its end, unlink them and warn on the terminal of "leaked semaphore objects": two more lines
    after the one line. Its finalizers of priority 0 and up (the queues' and the locks' clean-up)
    are what a normal exit runs first; none of them waits for a worker.
    """
    util = sys.modules.get("multiprocessing.util")
    if util is not None:
        util._run_finalizers(0)  # type: ignore[attr-defined]


def _release(planned: Any) -> None:
    """Stop renewing the run's lease and let it expire now: nobody works on the run any more."""
    if planned.keeper is not None:
        planned.keeper.stop()
    if planned.owner is not None:
        planned.ledger.release_run_lease(planned.ref.run_id, planned.owner)


def _crash_flow_run(flow_run_id: str, reason: str, run_id: str | None) -> None:
    """Mark the flow run Crashed, as Prefect itself marks one that an interrupt ended."""
    from uuid import UUID

    from prefect import get_client
    from prefect.states import Crashed

    message = f"{reason}; finish it with --resume {run_id}" if run_id else reason
    with get_client(sync_client=True) as client:
        client.set_flow_run_state(UUID(flow_run_id), Crashed(message=message), force=True)
