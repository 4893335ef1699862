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
  (OpenAI: ``/v1/files`` then ``/v1/batches``), and gives its id;
* :meth:`ProviderBatches.state` says whether the batch has ended;
* :meth:`ProviderBatches.collect` reads its output and error files: each
  row's :class:`~models.endpoints.wire.Reply`, or the
  :class:`~shardwise.errors.InputError` with the provider's reason for a
  line that errored or expired.

:class:`OpenAIBatches` speaks OpenAI's Files and Batches endpoints,
:class:`AnthropicBatches` Anthropic's Message Batches
(``/v1/messages/batches``, whose requests travel inline, no file).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from shardwise.errors import InputError
from shardwise.models.endpoints.wire import Reply, Wire, chat_reply, messages_reply

__all__ = ["COMPLETION_WINDOW_S", "LIMITS", "AnthropicBatches", "BatchState", "OpenAIBatches", "cut"]

T = TypeVar("T")

LIMITS = {"openai": (50_000, 200 * 1024 * 1024), "anthropic": (100_000, 256 * 1024 * 1024)}
"""Per provider: the most requests, and bytes, one batch may hold."""
COMPLETION_WINDOW_S = 24 * 3600.0
"""The providers' completion window: a batch not ended this long after it was submitted never will."""
_ENDED = {"completed", "failed", "expired", "cancelled", "ended"}
"""Statuses after which a batch runs no more lines (OpenAI's, and Anthropic's ``ended``)."""


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
    """Where a provider batch is: its status, whether it has ended, and its result files once it has."""

    batch_id: str
    status: str
    output_file_id: str | None = None
    error_file_id: str | None = None

    @property
    def ended(self) -> bool:
        return self.status in _ENDED


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

    async def submit(self, client: Any, lines: bytes) -> str:
        """Upload ``lines`` and create their batch; the batch id (record it before waiting on it)."""
        uploaded = await client.files.create(file=("shardwise-batch.jsonl", lines), purpose="batch")
        batch = await client.batches.create(
            input_file_id=uploaded.id, endpoint=self.endpoint, completion_window="24h"
        )
        return str(batch.id)

    async def state(self, client: Any, batch_id: str) -> BatchState:
        batch = await client.batches.retrieve(batch_id)
        return BatchState(batch_id, str(batch.status), batch.output_file_id, batch.error_file_id)

    async def collect(self, client: Any, state: BatchState) -> dict[str, Reply | InputError]:
        """Each line's outcome by ``custom_id``: a reply, or the provider's reason it has none.

        A line in neither file (the batch expired or was cancelled before it ran) is a dead letter
        naming the batch's status; the caller knows which ids it sent.
        """
        outcomes: dict[str, Reply | InputError] = {}
        for file_id in (state.output_file_id, state.error_file_id):
            if file_id is None:
                continue
            content = await client.files.content(file_id)
            for line in content.text.splitlines():
                if line.strip():
                    record = json.loads(line)
                    outcomes[str(record["custom_id"])] = _outcome(record, state.batch_id)
        return outcomes


def _outcome(record: dict[str, Any], batch_id: str) -> Reply | InputError:
    """One output or error line of a batch as a reply or a dead letter with the provider's reason."""
    response = record.get("response") or {}
    error = record.get("error")
    status = response.get("status_code")
    if error or status != 200:
        body = response.get("body") or {}
        reason = (
            (error or body.get("error") or {}).get("message") if isinstance(error or body, dict) else None
        )
        return InputError(
            f"batch {batch_id} line failed ({status or 'no status'}): {reason or error or body}"
        )
    from openai.types.chat import ChatCompletion

    return chat_reply(ChatCompletion.model_validate(response["body"]), {})


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

    async def submit(self, client: Any, lines: list[dict[str, Any]]) -> str:
        """Create the batch; its id (record it before waiting on it)."""
        batch = await client.messages.batches.create(requests=lines)
        return str(batch.id)

    async def state(self, client: Any, batch_id: str) -> BatchState:
        batch = await client.messages.batches.retrieve(batch_id)
        return BatchState(batch_id, str(batch.processing_status))

    async def collect(self, client: Any, state: BatchState) -> dict[str, Reply | InputError]:
        """Each request's outcome by ``custom_id``: a reply, or why it has none (errored, expired,
        canceled)."""
        outcomes: dict[str, Reply | InputError] = {}
        async for item in await client.messages.batches.results(state.batch_id):
            result = item.result
            if result.type == "succeeded":
                outcomes[item.custom_id] = messages_reply(result.message, {})
                continue
            detail = getattr(getattr(getattr(result, "error", None), "error", None), "message", None)
            reason = f"{result.type}: {detail}" if detail else str(result.type)
            outcomes[item.custom_id] = InputError(f"batch {state.batch_id} request {reason}")
        return outcomes
