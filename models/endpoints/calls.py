"""Many requests in flight, each retried under the shard's deadline: what ``score_window`` runs.

A loaded endpoint model owns one :class:`Caller`: an event loop in a thread of
its own (so windows from any thread share one loop, one connection pool and
one concurrency bound), the SDK client, the host's budgets
(:mod:`models.endpoints.budget`) and one :class:`~shardwise.retry_policy.Outage`.

:meth:`Caller.each` runs one coroutine per item, at most ``max_concurrency``
at once, and gives their outcomes in input order. Each request:

1. waits for a slot, for the pause a server asked for, and for room in the
   requests- and tokens-per-minute budgets;
2. is sent; its failure is sorted (:func:`~models.endpoints.failures.classify`):
   a transient one is tried again after the run's backoff or the server's
   ``Retry-After``, whichever is longer, until the outage has lasted the
   run's retry deadline, when :class:`~shardwise.errors.RetryDeadlineError`
   ends the window; a row's own refusal becomes that row's
   :class:`~shardwise.errors.InputError`; a refusal of the key or model ends
   the window with a :class:`~shardwise.errors.ConfigError`;
3. on success, ends the outage and corrects the token budget from usage; a
   success whose body cannot be read (:class:`~models.endpoints.wire.MalformedAnswer`)
   is that row's dead letter, naming the endpoint and what the body lacked.

The outage clock is the endpoint's: any request's success ends it, so a
server that throttles one request in five never runs out the deadline, and
one that is down does, once, for the whole window.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from shardwise.errors import ConfigError, InputError, ShardwiseError
from shardwise.models.endpoints.failures import Failure, classify
from shardwise.models.endpoints.wire import MalformedAnswer
from shardwise.retry_policy import Outage, RetryPolicy

if TYPE_CHECKING:
    from shardwise.models.endpoints.budget import Budgets

__all__ = ["Caller", "RequestCounts", "budgets"]

T = TypeVar("T")
R = TypeVar("R")
_log = logging.getLogger(__name__)


def budgets(identity: str, requests_per_minute: int | None, tokens_per_minute: int | None) -> Budgets:
    """The host's budgets for ``identity`` (pyrate-limiter, imported here, when a remote model loads; it was
    found installed when the model was chosen, :func:`~models.endpoints.endpoint_spec`)."""
    from shardwise.models.endpoints.budget import Budgets

    return Budgets(identity, requests_per_minute, tokens_per_minute, None)


class RequestCounts:
    """How many requests a caller sent, and how each ended: for logs, tests and benchmarks."""

    def __init__(self) -> None:
        self.sent = 0
        self.ok = 0
        self.retried = 0
        self.rows_refused = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


class Caller:
    """One endpoint's requests from one process: a loop thread, a client, budgets, an outage clock."""

    def __init__(
        self,
        endpoint: str,
        make_client: Callable[[], Any],
        budgets: Budgets,
        max_concurrency: int,
        policy: RetryPolicy,
    ) -> None:
        self.endpoint = endpoint
        self.counts = RequestCounts()
        self._make_client = make_client
        self._client: Any = None
        self._budgets = budgets
        self._max_concurrency = max_concurrency
        self._slots: asyncio.Semaphore | None = None
        self._outage = Outage(policy)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="shardwise-endpoint", daemon=True)
        self._thread.start()

    def run(self, coroutine: Awaitable[T]) -> T:
        """Run ``coroutine`` on the caller's loop and wait for it (from any thread but the loop's)."""
        future: Future[T] = asyncio.run_coroutine_threadsafe(coroutine, self._loop)  # type: ignore[arg-type]
        return future.result()

    async def client(self) -> Any:
        """The SDK client, made on the loop the first time it is needed."""
        if self._client is None:
            self._client = self._make_client()
        return self._client

    async def each(
        self, items: Sequence[T], call: Callable[[T], Awaitable[R]], estimate: Callable[[T], int]
    ) -> list[R | InputError]:
        """``call(item)`` for every item, bounded and retried; outcomes in input order.

        An outcome is the call's result or the row's :class:`InputError`; an error that concerns every
        row (a refused key, the deadline passed) cancels the rest and is raised.
        """
        if self._slots is None:  # made on the loop; shared by every window, whichever thread sent it
            self._slots = asyncio.Semaphore(self._max_concurrency)
        slots = self._slots
        tasks = [asyncio.ensure_future(self._one(item, call, estimate(item), slots)) for item in items]
        if not tasks:
            return []
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = next((t for t in done if t.exception() is not None), None)
        if failed is not None:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            raise failed.exception()  # type: ignore[misc]
        return [task.result() for task in tasks]

    async def _one(
        self, item: T, call: Callable[[T], Awaitable[R]], estimate: int, slots: asyncio.Semaphore
    ) -> R | InputError:
        tries = 0
        while True:
            tries += 1
            async with slots:
                charged = await self._budgets.acquire(estimate)
                self.counts.sent += 1
                try:
                    result = await call(item)
                except MalformedAnswer as exc:  # the row ran; its answer cannot be read: its dead letter
                    self.counts.rows_refused += 1
                    return MalformedAnswer(f"{self.endpoint}: {exc}")
                except Exception as exc:
                    failure = classify(exc)
                    if failure is None:
                        raise
                    outcome = self._failed(failure, exc, tries)
                    if outcome is not None:
                        return outcome
                    wait = self._wait(failure, tries)
                else:
                    self._outage.recovered()
                    self.counts.ok += 1
                    self._budgets.heed(getattr(result, "headers", {}) or {})
                    self._budgets.settle(charged, getattr(result, "tokens", None))
                    return result
            self.counts.retried += 1
            await asyncio.sleep(wait)  # outside the slot: a waiting retry holds no connection

    def _failed(self, failure: Failure, exc: Exception, tries: int) -> InputError | None:
        """The row's dead letter, or None to try again; raises for what concerns every row."""
        if failure.kind == "row":
            self.counts.rows_refused += 1
            return InputError(f"{self.endpoint} refused the request: {failure.reason}")
        if failure.kind == "config":
            raise ConfigError(_refusal(self.endpoint, failure)) from None
        _log.warning("%s: request failed on try %d: %s", self.endpoint, tries, failure.reason)
        return None

    def _wait(self, failure: Failure, tries: int) -> float:
        """Seconds to wait before this request's next try; past the deadline, the error the shard fails with.

        The backoff doubles with the request's own tries, not the endpoint's failures: many requests in
        flight fail together under throttling, and one request's first retry should not wait as if it
        had failed a dozen times. The deadline is the endpoint's outage clock.
        """
        _, elapsed = self._outage.failed()
        left = self._outage.policy.deadline_s - elapsed
        if left <= 0:
            raise self._outage.give_up(
                f"requests to {self.endpoint}", ShardwiseError(failure.reason)
            ) from None
        wait = self._outage.policy.delay(tries)
        if failure.retry_after is not None:
            wait = max(wait, failure.retry_after)
            self._budgets.pause(min(failure.retry_after, left))
        return min(wait, left)

    def close(self) -> None:
        """Close the client and stop the loop thread."""
        if self._client is not None and not self._loop.is_closed():
            try:
                self.run(self._client.close())
            except Exception:  # closing is best effort: the process may be going away
                _log.debug("closing the %s client failed", self.endpoint, exc_info=True)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


def _refusal(endpoint: str, failure: Failure) -> str:
    """One line for a refusal that concerns every row, naming the endpoint and the fix, never the key."""
    if failure.status in (401, 403):
        return (
            f"{endpoint} refused the API key ({failure.reason}); check that --api-key names the right "
            "variable or secret, and that the key may use this model"
        )
    return (
        f"{endpoint} has no such model or path ({failure.reason}); check the model name after openai: or "
        "anthropic:, and that --api-base ends where the API's paths begin (e.g. .../v1)"
    )
