"""The run's :class:`~shardwise.model.recorded.BatchBook`: a shard's provider batches in its ledger.

Bound to one run and shard by :func:`~shardwise.pipeline.shard.score_shard`
and handed to the engine, which gives it to a recording model with each
window (a remote model with ``--batch-api``). Each step is its own
transaction, retried on the shard's clock like every other database step, so
a batch id is committed before the model waits on its batch. A worker told
to stop (SIGTERM) lets the shard go between two polls: its batches are
recorded, and the shard's next attempt collects them.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.model.recorded import ProviderBatch, WindowRef
from shardwise.pipeline.preemption import refuse_if_draining
from shardwise.results.ledger import Ledger
from shardwise.retry_policy import Outage, retry_step

__all__ = ["LedgerBook"]


@dataclass(frozen=True)
class LedgerBook:
    """``shardwise_provider_batches`` of one run's shard; ``first_row`` is the rows the shard had
    committed before this attempt, so a window's recorded position is its place in the whole shard."""

    ledger: Ledger
    run_id: str
    shard_id: int
    first_row: int
    outage: Outage

    def recorded(self, window: WindowRef) -> list[ProviderBatch]:
        stored = retry_step(
            lambda: self.ledger.window_batches(self.run_id, self.shard_id, window.identity),
            what=f"read the provider batches of shard {self.shard_id}",
            outage=self.outage,
        )
        return [found.batch for found in stored]

    def record(self, window: WindowRef, batch: ProviderBatch) -> None:
        where = (window.identity, self.first_row + window.position, window.keys[0])
        retry_step(
            lambda: self.ledger.record_provider_batch(self.run_id, self.shard_id, where, batch),
            what=f"record provider batch {batch.batch_id} of shard {self.shard_id}",
            outage=self.outage,
        )

    def ended(self, window: WindowRef, batch_index: int, status: str) -> None:
        retry_step(
            lambda: self.ledger.provider_batch_ended(
                self.run_id, self.shard_id, window.identity, batch_index, status
            ),
            what=f"record the end of a provider batch of shard {self.shard_id}",
            outage=self.outage,
        )

    def label(self, window: WindowRef, batch_index: int) -> str:
        return f"{self.run_id}/{self.shard_id}/{window.identity[:32]}/{batch_index}"

    def waiting(self, window: WindowRef) -> None:
        refuse_if_draining(self.shard_id)  # a draining worker waits on no batch: the next attempt will
