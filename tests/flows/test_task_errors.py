"""What a shard task raises crosses to the flow's process: a process pool, Dask and Ray pickle it."""

from __future__ import annotations

import pickle

import pytest
import tblib.pickling_support

from shardwise.errors import ShardwiseError, TransientError
from shardwise.tasks.sanitize import sanitized


class NeedsResponse(Exception):
    """An SDK's error: its __init__ takes arguments its pickled form does not carry (as openai's do)."""

    def __init__(self, message: str, *, response: object) -> None:
        super().__init__(message)
        self.response = response

    def __reduce__(self) -> tuple[object, ...]:  # as openai's errors reduce: unpickling calls __init__
        return (type(self), self.args)


def _raised_inside(error: BaseException, sdk: BaseException) -> BaseException:
    try:
        try:
            raise sdk
        except NeedsResponse:
            raise error from None
    except BaseException as exc:
        return exc


def test_an_error_raised_while_handling_an_sdk_error_pickles_with_tblib_as_dask_pickles_it() -> None:
    error = _raised_inside(ShardwiseError("batch lost"), NeedsResponse("404", response=object()))
    # distributed's import does this for every class known then; with or without it, the SDK's error
    # does not unpickle
    tblib.pickling_support.install(ShardwiseError, NeedsResponse)
    assert sanitized(error) is error
    back = pickle.loads(pickle.dumps(error))
    assert back.args == ("batch lost",) and back.__context__ is None


def test_an_error_that_does_not_unpickle_leaves_as_its_message_and_keeps_its_retry_class() -> None:
    class Odd(TransientError):
        def __init__(self, message: str, *, extra: int) -> None:
            super().__init__(message)

    clean = sanitized(Odd("the server went away", extra=1))
    assert type(clean) is TransientError and str(clean) == "Odd: the server went away"
    assert pickle.loads(pickle.dumps(clean)).args == clean.args


@pytest.mark.parametrize("chained", [True, False])
def test_a_chain_that_pickles_is_kept(chained: bool) -> None:
    cause = ValueError("bad row")
    error = ShardwiseError("shard failed")
    if chained:
        error.__cause__ = cause
    assert sanitized(error) is error and error.__cause__ is (cause if chained else None)
