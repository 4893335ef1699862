"""Exceptions leave a task without secrets: Prefect logs and stores what a task raises."""

from __future__ import annotations

import traceback

from shardwise.errors import RunTakenOverError, ShardwiseError, TransientError
from shardwise.secrets.redact import redact

__all__ = ["sanitized"]


def sanitized(exc: BaseException) -> BaseException:
    """``exc`` itself when its traceback holds no secret, else a redacted copy of the same retry class.

    The copy is raised ``from None``: a chained cause would print the secret
    again. Whether it is retried stays the same, because a transient error
    stays a :class:`TransientError`; a lost run stays a
    :class:`RunTakenOverError`, so the command line's exit code stays its own.
    """
    text = "".join(traceback.format_exception(exc))
    if redact(text) == text:
        return exc
    message = redact(f"{type(exc).__name__}: {exc}")
    for kept in (TransientError, RunTakenOverError):
        if isinstance(exc, kept):
            return kept(message)
    return ShardwiseError(message)
