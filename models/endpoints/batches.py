"""The providers' Batch APIs (half price, asynchronous), as three steps a run records between.

A chunk of rows becomes one provider batch: a JSON Lines file of requests,
each with ``custom_id`` = the row's key. The steps are apart so that the run
can write the batch id to its ledger *after* :meth:`ProviderBatches.submit`
and *before* it waits: a resumed or re-run shard finds the id and calls
:meth:`ProviderBatches.collect` instead of submitting again, so a crash never
pays twice.

* :func:`cut` splits a chunk's requests to fit the provider's limits
  (OpenAI: 50,000 requests or 200 MB a file; Anthropic: 100,000 requests or
  256 MB a batch);
* :meth:`ProviderBatches.submit` uploads the lines and creates the batch
  (OpenAI: ``/v1/files`` then ``/v1/batches``), and gives its id; an OpenAI
  batch carries the book's label in its metadata, and one of the last 24
  hours that carries it already (submitted by an attempt killed before it
  recorded the id) is taken instead of a new one;
* :meth:`ProviderBatches.state` says whether the batch has ended (a 404
  there is :class:`BatchLost`: the rows are submitted again on the next
  attempt);
* :meth:`ProviderBatches.collect` reads its output and error files: each
  row's :class:`~models.endpoints.wire.Reply`, or the
  :class:`~shardwise.errors.InputError` with the provider's reason for a
  line that errored or expired, a row with two result lines, or an answer
  that is not a chat completion.

:class:`OpenAIBatches` speaks OpenAI's Files and Batches endpoints,
:class:`AnthropicBatches` Anthropic's Message Batches
(``/v1/messages/batches``, whose requests travel inline, no file).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shardwise.errors import InputError, ShardwiseError
from shardwise.models.endpoints.wire import MalformedAnswer, Reply, Wire, chat_reply, messages_reply

__all__ = [
    "COMPLETION_WINDOW_S",
    "LIMITS",
    "LOST",
    "AnthropicBatches",
    "BatchLost",
    "BatchState",
    "OpenAIBatches",
    "cut",
]

T = TypeVar("T")
_log = logging.getLogger(__name__)

LIMITS = {"openai": (50_000, 200 * 1024 * 1024), "anthropic": (100_000, 256 * 1024 * 1024)}
"""Per provider: the most requests, and bytes, one batch may hold."""
COMPLETION_WINDOW_S = 24 * 3600.0
"""The providers' completion window: a batch not ended this long after it was submitted never will."""
_ENDED = {"completed", "failed", "expired", "cancelled", "ended"}
"""Statuses after which a batch runs no more lines (OpenAI's, and Anthropic's ``ended``)."""
_NOT_TAKEN = {"failed", "cancelling", "cancelled"}
"""Statuses of a labelled, unrecorded batch that is submitted again rather than taken."""
_LABEL = "shardwise_batch"
"""The metadata key an OpenAI batch carries its :meth:`~shardwise.model.recorded.BatchBook.label` under."""


LOST = "lost"
"""The status a recorded batch gets when its provider no longer knows it: its rows are submitted anew."""


class BatchLost(ShardwiseError):
    """A recorded batch its provider answers 404 for: lost, or the key is another project's. The shard
    fails in one line; the batch is recorded as :data:`LOST`, so the next attempt (``--resume``)
    submits its rows in a new batch."""

    def __init__(self, endpoint: str, batch_id: str, reason: str, rows: int | None = None) -> None:
        self.endpoint, self.batch_id, self.reason, self.rows = endpoint, batch_id, reason, rows
        held = f" ({rows} rows)" if rows is not None else ""
        super().__init__(
            f"provider batch {batch_id}{held} is not found at {endpoint} ({reason}): the provider lost "
            "it, or --api-key names a key of another project; it is recorded as lost, and --resume "
            "submits its rows again in a new batch (check the key first: the lost batch may still run)"
        )

    def __reduce__(self) -> tuple[Any, ...]:  # pickles to the flow from a worker process
        return (BatchLost, (self.endpoint, self.batch_id, self.reason, self.rows))

    def of_rows(self, rows: int) -> BatchLost:
        """The same error, naming how many rows the batch held."""
        return BatchLost(self.endpoint, self.batch_id, self.reason, rows)


def cut(items: Sequence[T], size: Callable[[T], int], provider: str) -> list[list[T]]:
    """``items`` in order, in runs that each fit one batch of ``provider`` (requests and bytes)."""
    most, most_bytes = LIMITS[provider]
    runs: list[list[T]] = []
    current: list[T] = []
    held = 0
    for item in items:
        weight = size(item)
        if current and (len(current) >= most or held + weight > most_bytes):
            runs.append(current)
            current, held = [], 0
        current.append(item)
        held += weight
    if current:
        runs.append(current)
    return runs


@dataclass(frozen=True)
class BatchState:
    """Where a provider batch is: its status, whether it has ended, its result files once it has, and
    the provider's reason when the batch itself failed (OpenAI's ``errors``: a file it would not run)."""

    batch_id: str
    status: str
    output_file_id: str | None = None
    error_file_id: str | None = None
    reason: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in _ENDED

    def unran(self) -> InputError:
        """The dead letter of a row the batch never ran, with the provider's reason when it gave one."""
        why = f" ({self.reason})" if self.reason else ""
        return InputError(f"batch {self.batch_id} ended {self.status}{why} before this row ran")


class _Outcomes:
    """A batch's outcomes by ``custom_id`` as its lines are read: a row answered twice is a dead letter
    (which answer is the row's cannot be told), and a line with no readable ``custom_id`` is counted."""

    def __init__(self, batch_id: str) -> None:
        self.batch_id = batch_id
        self.found: dict[str, Reply | InputError] = {}
        self._lines: dict[str, int] = {}
        self.unreadable = 0

    def add(self, key: str, outcome: Callable[[], Reply | InputError]) -> None:
        seen = self._lines[key] = self._lines.get(key, 0) + 1
        if seen == 1:
            self.found[key] = _or_malformed(self.batch_id, outcome)
        else:
            self.found[key] = InputError(
                f"batch {self.batch_id} holds {seen} result lines for this row (custom_id {key!r}); "
                "which one is its answer cannot be told, so none is kept"
            )

    def result(self, state: BatchState) -> dict[str, Reply | InputError]:
        if self.unreadable:
            _log.warning(
                "batch %s: %d result lines had no readable custom_id; their rows are dead letters",
                state.batch_id,
                self.unreadable,
            )
        return self.found


def _or_malformed(batch_id: str, outcome: Callable[[], Reply | InputError]) -> Reply | InputError:
    try:
        return outcome()
    except MalformedAnswer as exc:
        return MalformedAnswer(f"batch {batch_id} line: {exc}")


class OpenAIBatches:
    """An OpenAI-compatible server's Files and Batches endpoints, for one generator's chat requests."""

    endpoint = "/v1/chat/completions"

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def lines(self, rows: Sequence[tuple[str, str]]) -> bytes:
        """The JSON Lines file of ``(custom_id, prompt body)`` rows: one chat request each."""
        return b"".join(
            json.dumps(
                {
                    "custom_id": key,
                    "method": "POST",
                    "url": self.endpoint,
                    "body": self.wire.chat_request(body),
                }
            ).encode()
            + b"\n"
            for key, body in rows
        )

    def size(self, row: tuple[str, str]) -> int:
        """The bytes one row's line adds to the batch's file (what :func:`cut` weighs)."""
        return len(self.lines([row]))

    async def submit(self, client: Any, lines: bytes, label: str | None = None) -> str:
        """Upload ``lines`` and create their batch; the batch id (record it before waiting on it).

        With a ``label`` (:meth:`~shardwise.model.recorded.BatchBook.label`) the batch carries it in its
        metadata, and a batch of the last 24 hours that carries it already (an earlier attempt's, killed
        before it recorded the id) is taken instead of creating another.
        """
        if label is not None:
            found = await self._labelled(client, label)
            if found is not None:
                _log.warning(
                    "batch %s labelled %s was submitted and never recorded: it is taken", found, label
                )
                return found
        uploaded = await client.files.create(file=("shardwise-batch.jsonl", lines), purpose="batch")
        extra = {"metadata": {_LABEL: label}} if label is not None else {}
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=self.endpoint, completion_window="24h", **extra
        )
        return str(batch.id)

    async def _labelled(self, client: Any, label: str) -> str | None:
        """The id of a batch created in the completion window whose metadata carries ``label``, newest
        first; one that failed or was cancelled is not taken (its rows are submitted again)."""
        since = time.time() - COMPLETION_WINDOW_S
        async for batch in client.batches.list(limit=100):
            if (batch.created_at or 0) < since:
                break
            if (batch.metadata or {}).get(_LABEL) == label and batch.status not in _NOT_TAKEN:
                return str(batch.id)
        return None

    async def state(self, client: Any, batch_id: str) -> BatchState:
        batch = await client.batches.retrieve(batch_id)
        return BatchState(
            batch_id, str(batch.status), batch.output_file_id, batch.error_file_id, _batch_errors(batch)
        )

    async def collect(self, client: Any, state: BatchState) -> dict[str, Reply | InputError]:
        """Each line's outcome by ``custom_id``: a reply, or the provider's reason it has none.

        A line in neither file (the batch expired, was cancelled or failed before it ran) is a dead
        letter naming the batch's status (:meth:`BatchState.unran`); the caller knows which ids it sent.
        """
        outcomes = _Outcomes(state.batch_id)
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id is None:
                continue
            content = await client.files.content(file_id)
            for line in content.text.splitlines():
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    key = str(record["custom_id"])
                except (ValueError, TypeError, KeyError):
                    outcomes.unreadable += 1
                    continue
                outcomes.add(key, lambda record=record: _outcome(record, state.batch_id))
        return outcomes.result(state)


def _outcome(record: Any, batch_id: str) -> Reply | InputError:
    """One output or error line of a batch as a reply or a dead letter with the provider's reason."""
    response = (record.get("response") if isinstance(record, dict) else None) or {}
    error = record.get("error") if isinstance(record, dict) else "the line is not a JSON object"
    status = response.get("status_code") if isinstance(response, dict) else None
    if error or status != 200:
        body = (response.get("body") if isinstance(response, dict) else None) or {}
        reason = (
            (error or body.get("error") or {}).get("message") if isinstance(error or body, dict) else None
        )
        return InputError(
            f"batch {batch_id} line failed ({status or 'no status'}): {reason or error or body}"
        )
    from openai.types.chat import ChatCompletion

    body = response.get("body")
    try:
        answer = ChatCompletion.model_validate(body)
    except ValueError as exc:  # pydantic's ValidationError: the body is no chat completion
        raise MalformedAnswer(
            f"the answer (status 200) is not a chat completion: {' '.join(str(exc).split())[:200]}"
        ) from exc
    return chat_reply(answer, {})


def _batch_errors(batch: Any) -> str | None:
    """OpenAI's reason a batch failed as a whole (``errors.data``: code, message, line), in one line."""
    data = getattr(getattr(batch, "errors", None), "data", None) or []
    reasons = []
    for error in data[:3]:
        code, message, line = (getattr(error, name, None) for name in ("code", "message", "line"))
        where = f" (line {line})" if line is not None else ""
        reasons.append(f"{code + ': ' if code else ''}{message or 'no message'}{where}")
    more = f"; and {len(data) - 3} more" if len(data) > 3 else ""
    return "; ".join(reasons) + more if reasons else None


class AnthropicBatches:
    """Anthropic's Message Batches, for one generator's messages."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def lines(self, rows: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
        """The batch's requests for ``(custom_id, prompt body)`` rows: one message each."""
        return [{"custom_id": key, "params": self.wire.messages_request(body)} for key, body in rows]

    def size(self, row: tuple[str, str]) -> int:
        """The bytes one row's request adds to the batch's body (what :func:`cut` weighs)."""
        return len(json.dumps(self.lines([row])[0]).encode()) + 1

    async def submit(self, client: Any, lines: list[dict[str, Any]], label: str | None = None) -> str:
        """Create the batch; its id (record it before waiting on it). Message Batches keep no metadata
        and take no idempotency key, so ``label`` is not sent: a kill between the provider accepting the
        batch and the run recording its id submits the rows again."""
        batch = await client.messages.batches.create(requests=lines)
        return str(batch.id)

    async def state(self, client: Any, batch_id: str) -> BatchState:
        batch = await client.messages.batches.retrieve(batch_id)
        return BatchState(batch_id, str(batch.processing_status))

    async def collect(self, client: Any, state: BatchState) -> dict[str, Reply | InputError]:
        """Each request's outcome by ``custom_id``: a reply, or why it has none (errored, expired,
        canceled)."""
        outcomes = _Outcomes(state.batch_id)
        async for item in await client.messages.batches.results(state.batch_id):
            key = getattr(item, "custom_id", None)
            if not isinstance(key, str):
                outcomes.unreadable += 1
                continue
            outcomes.add(
                key, lambda item=item: _message_outcome(getattr(item, "result", None), state.batch_id)
            )
        return outcomes.result(state)


def _message_outcome(result: Any, batch_id: str) -> Reply | InputError:
    """One Message Batch result as a reply, or a dead letter with why it has none."""
    if getattr(result, "type", None) == "succeeded":
        return messages_reply(result.message, {})
    detail = getattr(getattr(getattr(result, "error", None), "error", None), "message", None)
    kind = getattr(result, "type", None)
    reason = f"{kind}: {detail}" if detail else str(kind)
    return InputError(f"batch {batch_id} request {reason}")
