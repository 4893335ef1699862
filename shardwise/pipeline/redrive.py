"""Re-drive dead letters: choose which keys of a run's ``shardwise_errors`` to score again.

A row is dead-lettered because its input was unusable (NULL, empty, not
text). Scoring it again only helps once someone fixed the input, so by
default a redrive takes the keys whose current input fingerprint differs
from the one recorded with the dead letter; ``force`` takes every key still
in the source. A key whose input is NULL now and was NULL then is unchanged
(None equals None): re-scoring it would only dead-letter it again.

Earlier redrives of the same run count: a key an earlier redrive scored is
already redriven (left out unless ``force``), and a key it dead-lettered
again is unchanged unless its input changed since that redrive too. So a
second redrive of the same fixed rows says there is nothing to redrive.

The chosen keys become a :class:`~shardwise.sources.keyed.KeyedSource`,
planned and scored as a new run: the old run's dead letters stay as its
history, and rows that are still bad are dead-lettered again under the new run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError
from shardwise.lineage import value_fingerprint
from shardwise.results import Ledger, StoredDeadLetter
from shardwise.secrets.by_reference import same_location
from shardwise.sources import Source
from shardwise.sources.base import Key
from shardwise.sources.keyed import KeyedSource

__all__ = ["RedriveSelection", "redrive_keys", "redrive_source"]

_RUN_IDS = "SELECT run_id, status, started_at FROM shardwise_runs ORDER BY started_at DESC"


@dataclass(frozen=True)
class RedriveSelection:
    """Which dead-lettered keys of run ``run_id`` to score again, and why the others are left out.

    ``total`` counts the run's dead letters (rows of ``shardwise_errors``);
    the other counts are of distinct keys.
    """

    run_id: str
    force: bool
    keys: tuple[Key, ...]
    """Keys to score again, typed as the source holds them, sorted."""
    unchanged: int
    """Keys whose input has the fingerprint it failed with; left out unless ``force``."""
    missing: tuple[str, ...]
    """Keys (as the ledger stores them: text) no longer in the source, e.g. deleted rows."""
    total: int
    redriven: int = 0
    """Keys an earlier redrive of the run already scored; left out unless ``force``."""

    @property
    def params(self) -> dict[str, Any]:
        """What a redrive plan records about its selection."""
        return {
            "redrive_of": self.run_id,
            "force": self.force,
            "dead_letters": self.total,
            "unchanged": self.unchanged,
            "missing": len(self.missing),
            "redriven": self.redriven,
        }


def redrive_keys(
    ledger: Ledger, results_table: str, source: Source, run_id: str, force: bool, identity: str | None = None
) -> RedriveSelection:
    """Read run ``run_id``'s dead letters from ``ledger`` and pick the keys whose input changed since.

    The run must have read ``source`` into ``results_table``. ``identity`` is how runs of ``source``
    are recorded (:func:`~shardwise.secrets.by_reference.by_reference`; its own identity when None), which
    finds the run's earlier redrives.
    ``source`` must be the source the run read. Each dead-lettered key's
    current rows are read (``read_keys``) and fingerprinted as the pipeline
    does (:func:`~shardwise.lineage.value_fingerprint`); a key changed when
    one of its rows has a fingerprint none of its dead letters had.
    """
    letters = _dead_letters(ledger, results_table, source, run_id)
    failed: dict[str, set[str | None]] = {}
    for letter in letters:
        if letter.source_key is not None:  # sources never read a NULL key, so never dead-letter one
            failed.setdefault(letter.source_key, set()).add(letter.input_fingerprint)
    redriven = _redriven(ledger, results_table, identity or source.identity, run_id, failed)
    found: dict[str, Key] = {}
    changed: set[str] = set()
    for row in source.read_keys(list(failed)):
        text = str(row.key)  # as the ledger wrote it
        if text not in failed:
            continue  # the source matched a non-canonical spelling (e.g. '007' for 7): not this key
        found[text] = row.key
        if value_fingerprint(row.value) not in failed[text]:
            changed.add(text)
    fresh = changed - redriven
    chosen = sorted(found[k] for k in (found if force else fresh))  # keys of one source: one type
    return RedriveSelection(
        run_id=run_id,
        force=force,
        keys=tuple(chosen),
        unchanged=len(found.keys() - changed),
        missing=tuple(k for k in failed if k not in found),
        total=len(letters),
        redriven=len(changed & redriven),
    )


def _redriven(
    ledger: Ledger, results_table: str, identity: str, run_id: str, failed: dict[str, set[str | None]]
) -> set[str]:
    """The keys earlier redrives of ``run_id`` scored (in their done shards) and did not dead-letter again.

    A key one of them dead-lettered again gains that fingerprint in ``failed``:
    it is unchanged unless its input changed since that redrive too.
    """
    redriven: set[str] = set()
    for redrive_id, plan in ledger.redrives_of(run_id, identity, results_table):
        done = ledger.done_shards(redrive_id)
        scored = {str(k) for shard in plan.shards if shard.shard_id in done for k in shard.bounds["keys"]}
        again = {
            letter.source_key: letter.input_fingerprint
            for letter in ledger.dead_letters(redrive_id)
            if letter.source_key is not None
        }
        for key in scored & failed.keys():
            if key in again:
                failed[key].add(again[key])
                redriven.discard(key)
            else:
                redriven.add(key)
    return redriven


def redrive_source(
    ledger: Ledger,
    results_table: str,
    source: Source,
    run_id: str,
    *,
    force: bool = False,
    identity: str | None = None,
) -> KeyedSource:
    """``source`` restricted to the keys :func:`redrive_keys` chooses; the plan records the selection."""
    selection = redrive_keys(ledger, results_table, source, run_id, force, identity)
    return KeyedSource(source, selection.keys, kind_label="redrive", extra_params=selection.params)


def _dead_letters(ledger: Ledger, results_table: str, source: Source, run_id: str) -> list[StoredDeadLetter]:
    """The run's dead letters, after checking the run exists and read this source into this table."""
    if (run := ledger.load_run(run_id)) is None:
        raise ConfigError(
            f"run {run_id!r} is not in the shardwise_runs table of {ledger.url}; redrive a run id "
            f"listed there ({_RUN_IDS})"
        )
    if not same_location(run.source_identity, source.identity):
        raise ConfigError(
            f"run {run_id!r} read source {run.source_identity!r}, not {source.identity!r}; "
            "redrive a run with the source it read"
        )
    if not same_location(run.results_table, results_table):
        raise ConfigError(
            f"run {run_id!r} wrote to results table {run.results_table!r}, not {results_table!r}; "
            "redrive it into the table it wrote"
        )
    letters = ledger.dead_letters(run_id)
    if not letters:
        raise ConfigError(
            f"run {run_id!r} has no dead letters in shardwise_errors of {ledger.url}; nothing to redrive "
            f"(runs with failed rows have rows_failed > 0 in shardwise_runs)"
        )
    return letters
