"""What a run reads: the source planned as its spec asks, with only-new or a redrive's keys.

Shared by a run's preparation (:mod:`~shardwise.pipeline.prepare`) and by
``shardwise plan`` (:mod:`~shardwise.pipeline.dryrun`), so both plan alike.
"""

from __future__ import annotations

from shardwise.errors import ConfigError
from shardwise.pipeline.redrive import redrive_source
from shardwise.pipeline.spec import RunSpec
from shardwise.results import Ledger
from shardwise.sources import Source, SourcePlan
from shardwise.sources.base import NewOnly

__all__ = ["SHARDS_PER_WORKER", "plan_source", "redrive_plan_source"]

SHARDS_PER_WORKER = 4
"""Default sizing cuts at least this many shards per worker, rows permitting, so work balances."""


def plan_source(
    spec: RunSpec, source: Source, model_version: str, ledger: Ledger, *, min_shards: int = 1
) -> SourcePlan:
    """Plan ``source`` as ``spec`` asks; with only-new, leave out what ``model_version`` already scored.

    ``model_version`` is the version that keys results, precision included
    (:func:`~shardwise.precision.versioned`).
    """
    return source.plan(
        shards=spec.shards,
        rows_per_shard=spec.rows_per_shard,
        new_only=_new_only(spec, source, model_version, ledger),
        min_shards=min_shards,
    )


def _new_only(spec: RunSpec, source: Source, model_version: str, ledger: Ledger) -> NewOnly | None:
    if not spec.only_new:
        return None
    if source.kind == "parquet":
        # The ledger alone answers "which objects were seen".
        return NewOnly(model_version, spec.results_table, ledger.seen_objects(source.identity))
    return NewOnly(model_version, spec.results_table)


def redrive_plan_source(spec: RunSpec, source: Source, ledger: Ledger, run_id: str) -> Source:
    """``source`` restricted to the dead-lettered keys of run ``spec.redrive`` that are to be scored again."""
    assert spec.redrive is not None
    if spec.redrive == run_id:
        raise ConfigError(f"a redrive of run {run_id!r} is a new run: give it another run id")
    return redrive_source(ledger, spec.results_table, source, spec.redrive, force=spec.force)
