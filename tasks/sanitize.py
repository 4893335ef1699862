"""Exceptions leave a task without secrets, and in a form that crosses to the flow's process:
Prefect logs and stores what a task raises, and a process pool, Dask or Ray pickles it."""

from __future__ import annotations

import pickle
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
    A chain with a link that does not unpickle is cut, and an error that does not unpickle itself
    leaves as the same copy, so the flow's process reads the shard's error, not a pickling one.
    """
    text = "".join(traceback.format_exception(exc))
    if redact(text) == text:
        _cut_chain(exc)
        if _crosses(exc):
            return exc
    message = redact(f"{type(exc).__name__}: {exc}")
    for kept in (TransientError, RunTakenOverError):
        if isinstance(exc, kept):
            return kept(message)
    return ShardwiseError(message)


def _crosses(exc: BaseException) -> bool:
    """Whether ``exc`` itself pickles and unpickles (an SDK's error may need arguments it never pickles)."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


def _cut_chain(exc: BaseException) -> None:
    """Drop ``exc``'s cause and context when a link of them does not cross: Dask's workers pickle an
    error with its chain (tblib), and one SDK error in it would fail the unpickling, not the shard."""
    seen: set[int] = set()
    link = exc.__cause__ or exc.__context__
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if not _crosses(link):
            exc.__cause__ = exc.__context__ = None
            exc.__suppress_context__ = True
            return
        link = link.__cause__ or link.__context__
