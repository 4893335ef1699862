"""What a run reads: the source planned as its spec asks, with only-new or a redrive's keys.

Shared by a run's preparation (:mod:`~shardwise.pipeline.prepare`) and by
``shardwise plan`` (:mod:`~shardwise.pipeline.dryrun`), so both plan alike.

Only-new works against every sink, three ways:

* a SQL source whose results table is in the same database: the plan and
  every shard's read anti-join the results table (the cheapest: nothing
  leaves the database);
* a source that plans by objects (Parquet, CSV and JSON Lines files, an
  image folder: ``Source.plans_by_objects``): objects whose (key, ETag) a
  completed run of the ledger already scored are skipped;
* a SQL source with results elsewhere (another database, Delta, Parquet),
  or one reading an image column of references, whose fingerprint is the
  MD5 of the fetched bytes (``Source.fingerprints_in_database`` is False):
  the source's rows are read once (images fetched) and fingerprinted, the sink gives the
  (key, input fingerprint) pairs it holds for the model version
  (:meth:`~shardwise.sinks.Sink.committed_inputs`), and the run becomes a
  keyed plan of the keys that are new or whose input changed (its stored
  plan lists them). A row without a fingerprint (NULL, a missing image) is
  always new, as in the anti-join.
"""

from __future__ import annotations

import logging

from shardwise.errors import ConfigError
from shardwise.lineage import value_fingerprint
from shardwise.pipeline.redrive import redrive_source
from shardwise.pipeline.spec import RunSpec
from shardwise.results import Ledger
from shardwise.secrets.by_reference import by_reference
from shardwise.sinks import Sink
from shardwise.sources import Source, SourcePlan
from shardwise.sources.base import Key, NewOnly, ReadFrom
from shardwise.sources.keyed import KeyedSource
from shardwise.words import plural

__all__ = ["SHARDS_PER_WORKER", "plan_source", "redrive_plan_source"]

_log = logging.getLogger(__name__)

SHARDS_PER_WORKER = 4
"""Default sizing cuts at least this many shards per worker, rows permitting, so work balances."""


def plan_source(
    spec: RunSpec,
    source: Source,
    model_version: str,
    ledger: Ledger,
    *,
    sink: Sink | None = None,
    target: str | None = None,
    min_shards: int = 1,
) -> SourcePlan:
    """Plan ``source`` as ``spec`` asks; with only-new, leave out what ``model_version`` already scored.

    ``model_version`` is the version that keys results, precision included
    (:func:`~shardwise.precision.versioned`). ``sink`` is where results go
    when they are not a results table in the SQL source's own database
    (None when they are): only-new then asks it what it holds. ``target``
    is where results go as the ledger records them (``RunRecord.results_table``,
    :meth:`~shardwise.pipeline.destination.ResultsPlace.target`): only-new over a
    Parquet source skips the objects scored into it, not into another.
    """
    if spec.run.only_new and not source.plans_by_objects and sink is not None:
        keys, skipped = _new_keys(source, sink, model_version)
        keyed = KeyedSource(source, keys, kind_label="only-new", extra_params=skipped)
        return keyed.plan(
            shards=spec.run.shards, rows_per_shard=spec.run.rows_per_shard, min_shards=min_shards
        )
    return source.plan(
        shards=spec.run.shards,
        rows_per_shard=spec.run.rows_per_shard,
        new_only=_new_only(spec, source, model_version, ledger, target),
        min_shards=min_shards,
    )


def _new_only(
    spec: RunSpec, source: Source, model_version: str, ledger: Ledger, target: str | None
) -> NewOnly | None:
    if not spec.run.only_new:
        return None
    if source.plans_by_objects:
        if target is None:
            raise ConfigError("only-new over a source of files needs the run's destination (target=...)")
        # The ledger alone answers "which objects were seen into this destination": under the name runs
        # record the source by (see shardwise.secrets.by_reference), or in clear, as runs before recorded a
        # source given by reference.
        names = {by_reference(spec.source.location, source.identity), source.identity}
        seen = frozenset().union(*(ledger.seen_objects(name, target) for name in names))
        return NewOnly(model_version, spec.results.table, seen)
    return NewOnly(model_version, spec.results.table)


def _new_keys(source: Source, sink: Sink, model_version: str) -> tuple[list[Key], dict[str, int]]:
    """Keys of ``source`` whose row ``sink`` does not hold for ``model_version`` with this input, and
    what the keyed plan skips (``null_keys``, and ``skipped_rows`` already scored) for the run's summary."""
    held = dict(sink.committed_inputs(model_version))
    plan = source.plan(shards=1)
    keys: list[Key] = []
    read = 0
    for shard in plan.shards:
        with source.open_reader(plan, shard, ReadFrom()) as reader:
            for row in reader.rows:
                read += 1
                # New: no result yet, or no fingerprint (a NULL, a missing image), or another input.
                stored, fingerprint = held.get(str(row.key)), value_fingerprint(row.value)
                if stored is None or fingerprint is None or stored != fingerprint:
                    keys.append(row.key)
    _log.info("only-new: %s of %s in %s", plural(len(keys), "row"), read, sink.target)
    return keys, {"null_keys": int(plan.params.get("null_keys") or 0), "skipped_rows": read - len(keys)}


def redrive_plan_source(spec: RunSpec, source: Source, ledger: Ledger, run_id: str, target: str) -> Source:
    """``source`` restricted to the dead-lettered keys of run ``spec.run.redrive`` that are to be scored
    again; ``target`` is where results go, as the ledger records it (``RunRecord.results_table``)."""
    assert spec.run.redrive is not None
    if spec.run.redrive == run_id:
        raise ConfigError(f"a redrive of run {run_id!r} is a new run: give it another run id")
    identity = by_reference(spec.source.location, source.identity)
    return redrive_source(ledger, target, source, spec.run.redrive, force=spec.run.force, identity=identity)
