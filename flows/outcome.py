"""What the ``shardwise`` command tells its caller: an exit code, and one line for a mistake.

The exit codes are part of the interface (schedulers and scripts branch on
them), so they are defined here once and printed in ``--help``:

====  ======================================================================
code  meaning
====  ======================================================================
0     done (a redrive with nothing to do is done too)
1     the run failed: some shards still failed after their retries;
      finished shards stay merged, and ``--resume RUN_ID`` finishes the rest
2     bad input: nothing ran; the message names the value and the fix
3     a service could not be reached (database, S3, Prefect API): nothing
      was lost, and the same command may succeed later
4     taken over: while this command ran the run, another process took it
      over (``--resume RUN_ID --force``) and finishes it; what this one
      merged stays merged. Nothing to retry, and nothing to resume
130   stopped by SIGINT (Ctrl-C); ``run`` and ``redrive`` print one line with
      the run's id and ``--resume RUN_ID``, which finishes it
141   stdout was closed before the command had printed everything (a reader
      such as ``head`` stopped reading); nothing more is printed, on either
      stream
143   stopped by SIGTERM (``kill``, ``timeout``, a scheduler), as 130
      otherwise
====  ======================================================================

Codes 130 and 143 are 128 + the signal's number, what a shell reports for a
program a signal killed, so a script or a scheduler reads them as it reads
any tool's. A scoring command stops within seconds of the signal, even while
a worker is blocked in a read, and keeps what it committed (see
:mod:`flows.interrupts`).

Code 4 is its own because neither neighbour fits the process that lost its
run: its input was fine (not 2), and running the same command again (as a
scheduler does on 3) would only start a third contender for the run.

A closed stdout (``shardwise runs | head -1``) is the reader's choice, not a
service failure, so it is not exit 3 (a :class:`BrokenPipeError` is a
:class:`ConnectionError`). The command stops quietly, the way a program
killed by ``SIGPIPE`` does, and exits 141 (128 + ``SIGPIPE``, what a shell
reports for such a program, e.g. ``yes | head -1``): under ``set -o pipefail``
the pipeline then behaves as it does with any Unix tool, and a script can
tell a cut-off listing from a complete one. This follows Python's own
recipe (see the ``signal`` module's note on ``SIGPIPE``): point stdout at
``/dev/null`` so that the final flush cannot fail again, then exit.
"""

from __future__ import annotations

import copy
import logging
import sys
from collections.abc import Callable

__all__ = [
    "BAD_INPUT",
    "BROKEN_PIPE",
    "OK",
    "RUN_FAILED",
    "SIGINT_EXIT",
    "SIGTERM_EXIT",
    "TAKEN_OVER",
    "UNAVAILABLE",
    "code_for",
    "exit_codes_help",
    "one_line",
    "print_traceback",
    "quiet_console",
    "say_error",
    "silence_stdout",
    "stdout_closed",
]

OK, RUN_FAILED, BAD_INPUT, UNAVAILABLE, TAKEN_OVER = 0, 1, 2, 3, 4
BROKEN_PIPE = 128 + 13
"""128 + SIGPIPE: stdout's reader went away (see the module's docstring)."""
SIGINT_EXIT, SIGTERM_EXIT = 128 + 2, 128 + 15
"""128 + SIGINT, 128 + SIGTERM: the command was stopped by that signal (see :mod:`flows.interrupts`)."""

_CODES = {
    "done": "0 done",
    "failed": "1 the run failed (some shards failed after retries: --resume finishes it)",
    "demo_failed": "1 one of the demo's runs failed (its line says why)",
    "bad": "2 bad input (nothing ran)",
    "unreachable": "3 a service could not be reached (database, S3, Prefect API): try again later",
    "taken": "4 the run was taken over by another process (resume --force), which finishes it",
    "signal_run": "130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM: the line names the run to --resume",
    "signal": "130 stopped by SIGINT (Ctrl-C), 143 by SIGTERM",
    "stopped": "0 stopped by Ctrl-C or SIGTERM (what it served is paused; serve again to resume it)",
    "pipe": "141 stdout was closed early (e.g. by head): the rest is not printed",
}
_COMMAND_CODES = {
    None: ("done", "failed", "bad", "unreachable", "taken", "signal_run", "pipe"),
    "run": ("done", "failed", "bad", "unreachable", "taken", "signal_run", "pipe"),
    "redrive": ("done", "failed", "bad", "unreachable", "taken", "signal_run", "pipe"),
    "demo": ("done", "demo_failed", "bad", "unreachable", "signal"),
    "plan": ("done", "bad", "unreachable", "signal", "pipe"),
    "runs": ("done", "bad", "unreachable", "signal", "pipe"),
    "watch": ("stopped", "bad", "unreachable"),
    "serve": ("stopped", "bad", "unreachable"),
    "deploy": ("done", "bad", "unreachable"),
    "cache": ("done", "bad", "signal", "pipe"),
}


def exit_codes_help(command: str | None = None) -> str:
    """The exit codes ``shardwise COMMAND`` can end with (every one for the top-level help), for its
    ``--help``: a service command never fails a run, so it does not mention resuming one."""
    return "exit codes: " + "; ".join(_CODES[code] for code in _COMMAND_CODES[command])


def stdout_closed(exc: BaseException) -> bool:
    """Whether ``exc`` is stdout's reader going away; if so, stdout is silenced (:func:`silence_stdout`).

    A broken pipe to anything else (a socket, a child process) is not: then
    False, and it is reported as the error it is. Linux tells them apart
    by the pipe itself: ``poll`` reports ``POLLERR`` on a pipe whose readers
    are all gone. Where ``poll`` is missing, a broken pipe is taken as stdout's.
    """
    import select

    if not isinstance(exc, BrokenPipeError):
        return False
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(_stdout_fd(), select.POLLOUT)
        if not any(events & select.POLLERR for _, events in poller.poll(0)):
            return False
    silence_stdout()
    return True


def silence_stdout() -> None:
    """Point stdout's file descriptor at ``/dev/null``: what is still buffered, and any later write,
    then goes nowhere instead of failing again (Python's recipe for ``SIGPIPE``)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, _stdout_fd())
    os.close(devnull)


def _stdout_fd() -> int:
    try:
        return sys.__stdout__.fileno() if sys.__stdout__ is not None else 1
    except (OSError, ValueError):  # replaced by a stream without a descriptor
        return 1


def code_for(exc: BaseException) -> int:
    """The exit code for an error that stopped a command.

    Shardwise's own errors say what they are (:mod:`shardwise.errors`): a
    transient one means a service was unreachable or busy, a lost run's lease
    that another process took it over, any other one a mistake in the input.
    A connection error that reached here unmapped came from talking to
    Prefect's API. Anything else is a failed run.
    """
    from pydantic import ValidationError

    from shardwise.errors import RunTakenOverError, ShardwiseError, TransientError

    if isinstance(exc, TransientError | ConnectionError) or _is_http_transport_error(exc):
        return UNAVAILABLE
    if isinstance(exc, RunTakenOverError):
        return TAKEN_OVER
    if isinstance(exc, ShardwiseError | ValidationError):
        return BAD_INPUT
    return RUN_FAILED


def _is_http_transport_error(exc: BaseException) -> bool:
    httpx = sys.modules.get("httpx")
    return httpx is not None and isinstance(exc, httpx.TransportError)


def one_line(exc: BaseException | str) -> str:
    """An error as one line, secrets redacted: a driver's second line ("Is the server running ...")
    is joined on, a traceback never appears."""
    from pydantic import ValidationError

    from shardwise.secrets.redact import redact

    if isinstance(exc, ValidationError):
        text = "; ".join(_validation_message(e) for e in exc.errors())
    else:
        text = str(exc) or type(exc).__name__
        if not isinstance(exc, str) and _is_http_transport_error(exc):
            text = f"the Prefect API could not be reached ({type(exc).__name__}: {text})"
    return redact(" ".join(part.strip() for part in text.splitlines() if part.strip()))


def _validation_message(error: object) -> str:
    assert isinstance(error, dict)
    from shardwise.flows.cli_options import flag_at

    flag = flag_at(error.get("loc", ()))
    message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
    if flag is None:  # a rule across options (of a section, or of the whole)
        return message
    if tuple(error.get("loc", ()))[-1:] and error["loc"][-1] in _UNQUOTED:
        return f"{flag}: {message}"
    return f"{flag} {error.get('input')!r}: {message}"


_UNQUOTED = frozenset({"api_key"})
"""Fields that name where a secret is: a value refused there may be the secret itself, typed by mistake,
so the refusal never quotes it."""


def say_error(exc: BaseException | str) -> None:
    """Print ``shardwise: error: <one line>`` on stderr."""
    print(f"shardwise: error: {one_line(exc)}", file=sys.stderr)


def print_traceback(exc: BaseException) -> None:
    """Print ``exc``'s traceback on stderr, redacted like every other line (see
    :mod:`shardwise.secrets.redact`).

    Python's own printing of an escaping exception would show a value reached
    through ``env:NAME`` in its message, so tracebacks are always printed here.
    """
    import traceback

    from shardwise.secrets.redact import redact

    sys.stderr.write(redact("".join(traceback.format_exception(exc))))
    sys.stderr.flush()


def quiet_console() -> Callable[[], None]:
    """Keep the terminal to warnings, without tracebacks; Prefect's run logs keep everything.

    Prefect logs each run to its API and to the console. On the console an
    operator wants the warnings (a shard retried, a precision fell back), the
    progress, and one line that says how the run ended, which the command
    prints itself; ``-v`` keeps the full console log. Child processes (the
    process pool's workers) inherit the level through the environment.
    Returns the function that puts everything back.
    """
    import os

    previous_env = os.environ.get(_CONSOLE_LEVEL)
    os.environ[_CONSOLE_LEVEL] = "WARNING"
    # Prefect configures its logging on first use, not on import: do it now, so the console handler
    # changed here is the one the run will log through.
    from prefect.logging.configuration import ensure_logging_setup

    ensure_logging_setup()

    changed = [
        (handler, handler.level, handler.formatter)
        for handler in logging.getLogger().handlers
        if type(handler).__name__ == "PrefectConsoleHandler"
    ]
    for handler, _, formatter in changed:
        handler.setLevel(logging.WARNING)
        handler.addFilter(_warnings_only)
        if formatter is not None:
            handler.setFormatter(_NoTraceback(formatter))

    def undo() -> None:
        for handler, level, formatter in changed:
            handler.setLevel(level)
            handler.removeFilter(_warnings_only)
            handler.setFormatter(formatter)  # type: ignore[arg-type]
        if previous_env is None:
            os.environ.pop(_CONSOLE_LEVEL, None)
        else:
            os.environ[_CONSOLE_LEVEL] = previous_env

    return undo


_CONSOLE_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"


def _warnings_only(record: logging.LogRecord) -> bool:
    # Errors end the run: the command prints them as its one closing line.
    return record.levelno < logging.ERROR


class _NoTraceback(logging.Formatter):
    """A console formatter that leaves out tracebacks (they stay in Prefect's run logs)."""

    def __init__(self, inner: logging.Formatter) -> None:
        super().__init__()
        self._inner = inner

    def format(self, record: logging.LogRecord) -> str:
        bare = copy.copy(record)
        bare.exc_info, bare.exc_text, bare.stack_info = None, None, None
        return self._inner.format(bare)
