"""Work a self-batching model hands to a provider and waits on, recorded per window so a crash never
pays for it twice: the provider's Batch APIs (``--batch-api``).

A model that submits a window's rows as provider batches (hours of work,
billed once submitted) must find those batches again after its process is
killed, rather than submitting the rows anew. The engine hands such a model
(:class:`Recorded`) a :class:`WindowRef`: which rows the window holds (their
keys, as the deterministic plan gives them again on resume), and a
:class:`BatchBook` bound to the run and shard, which the model writes each
batch id to, in its own transaction, before it waits on it, and reads the
recorded ones from before it submits anything. The pipeline binds the book
to the run's ledger (``shardwise_provider_batches``); the engine and the
model see only this protocol. Everything else is the one contract of
:class:`~shardwise.model.SelfBatching`: one outcome per value, in input
order, committed by chunk exactly once.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from shardwise.errors import ConfigError, InputError

__all__ = ["BatchBook", "ProviderBatch", "Recorded", "WindowRef"]


@dataclass(frozen=True)
class ProviderBatch:
    """One provider batch of a window: its index among the window's batches, the provider and the id it
    gave, how many rows it holds, when it was submitted, and its status (``submitted`` until it ends)."""

    batch_index: int
    provider: str
    batch_id: str
    rows_sent: int
    submitted_at: datetime
    status: str = "submitted"

    def __post_init__(self) -> None:
        if self.batch_index < 0 or self.rows_sent < 1 or not self.batch_id:
            raise ConfigError(
                f"a provider batch needs an index >= 0, at least one row and an id; got index "
                f"{self.batch_index}, {self.rows_sent} rows, id {self.batch_id!r}"
            )
        if self.submitted_at.tzinfo is None:
            raise ConfigError(f"batch {self.batch_id}: submitted_at must be an aware (UTC) time")


class BatchBook(Protocol):
    """Where a run records the provider batches of its windows (the ledger, bound to one run and shard)."""

    def recorded(self, window: WindowRef) -> list[ProviderBatch]:
        """The batches recorded for ``window`` (by this or an earlier attempt), by index."""
        ...

    def record(self, window: WindowRef, batch: ProviderBatch) -> None:
        """Record ``batch`` of ``window``, committed before this returns (its own transaction)."""
        ...

    def ended(self, window: WindowRef, batch_index: int, status: str) -> None:
        """Record that batch ``batch_index`` of ``window`` ended with ``status``."""
        ...

    def label(self, window: WindowRef, batch_index: int) -> str:
        """The name of ``window``'s batch ``batch_index``, unique to the run and shard and the same on
        every attempt: stored with the batch where the provider keeps metadata, so a batch the provider
        accepted and the book never recorded (a kill between the two) is found rather than paid twice."""
        ...

    def waiting(self, window: WindowRef) -> None:
        """Called between two looks at the window's running batches: raises to let the shard go (a worker
        told to stop), its batches recorded for the next attempt to collect."""
        ...


@dataclass(frozen=True)
class WindowRef:
    """A window as a recording model sees it: where it starts in the shard (``position``, rows before it
    in this engine run; the book adds the rows committed before the run began), its rows' keys in input
    order, and the book its batches are recorded in."""

    position: int
    keys: tuple[str, ...]
    book: BatchBook

    def __post_init__(self) -> None:
        if not self.keys:
            raise ConfigError("a recorded window holds at least one row")
        twice = [key for key, n in Counter(self.keys).items() if n > 1]
        if twice:
            raise ConfigError(
                f"key {twice[0]!r} appears twice in one window: provider batches name each row by its key "
                "(custom_id); give --key a column whose values are unique"
            )

    @property
    def identity(self) -> str:
        """The window's identity across attempts and resumes: a hash of its keys, in order."""
        return hashlib.sha256("\0".join(self.keys).encode()).hexdigest()


@runtime_checkable
class Recorded(Protocol):
    """A self-batching model whose work on a window may outlive its process (a provider batch): given
    the window's :class:`WindowRef`, it records what it submits and collects what was recorded."""

    def score_recorded(
        self, values: Sequence[object], window: WindowRef
    ) -> Sequence[Mapping[str, Any] | InputError]:
        """As :meth:`~shardwise.model.SelfBatching.score_window`, ``values`` being the rows of ``window``."""
        ...
