"""Set up and close one scoring run: source, model, store, plan, ledger.

The flow in ``flows/score.py`` calls :func:`prepare_run`, maps
:func:`~shardwise.pipeline.shard.score_shard` over ``prepared.todo``, then
:func:`finish_run`. Nothing here knows about Prefect.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from shardwise.config import EngineConfig
from shardwise.device import resolve_device
from shardwise.errors import ConfigError
from shardwise.lineage import code_version
from shardwise.model import Model
from shardwise.pipeline.redrive import redrive_source
from shardwise.pipeline.shard import ShardOutcome, score_shard
from shardwise.results import ResultStore, RunCounts, RunRecord
from shardwise.sources import (
    NewOnly,
    ParquetSource,
    Source,
    SourcePlan,
    SqlSource,
    is_sql_url,
    open_source,
    plan_objects,
)
from shardwise.sources.base import Shard
from shardwise.sources.keyed import KeyedSource, is_keyed

__all__ = [
    "PreparedRun",
    "RunSpec",
    "finish_run",
    "open_run_source",
    "plan_source",
    "prepare_run",
    "score_pending",
]

ModelLoader = Callable[[str, torch.device], Model]


@dataclass(frozen=True)
class RunSpec:
    """Everything a run needs, already resolved to real values (no secret names, no env lookups)."""

    source: str
    results: str
    results_table: str
    model: str = "tiny"
    table: str | None = None
    key: str = "id"
    text_column: str = "text"
    where: str | None = None
    shards: int | None = None
    rows_per_shard: int | None = None
    only_new: bool = False
    max_tokens: int | None = None
    device: str = "auto"
    resume: str | None = None
    redrive: str | None = None
    """A run id: score again only the keys that run dead-lettered (see :mod:`shardwise.pipeline.redrive`)."""
    force: bool = False
    """With ``redrive``: score every dead-lettered key still in the source, changed or not."""

    def __post_init__(self) -> None:
        if self.shards is not None and self.rows_per_shard is not None:
            raise ConfigError(
                f"give shards ({self.shards}) or rows_per_shard ({self.rows_per_shard}), not both"
            )
        if self.only_new and is_sql_url(self.source) and _db_of(self.source) != _db_of(self.results):
            raise ConfigError(
                "only_new on a SQL source anti-joins the results table inside the source database, "
                "so results must be written to the same database as the source; point --results at "
                "the source URL"
            )
        if self.redrive is not None and (not self.redrive or self.only_new or self.resume):
            raise ConfigError(
                f"redrive={self.redrive!r} needs a run id, and plans its own keys, so it takes neither "
                f"only_new ({self.only_new}) nor resume ({self.resume!r}); drop them, or drop redrive"
            )
        if self.force and self.redrive is None:
            raise ConfigError("force applies to a redrive only; pass redrive=RUN_ID, or drop force")


@dataclass
class PreparedRun:
    """A started run: what to score, with what, and where the results go."""

    record: RunRecord
    plan: SourcePlan
    source: Source
    store: ResultStore
    model: Model
    engine_config: EngineConfig
    todo: list[Shard] = field(default_factory=list)
    done_before: set[int] = field(default_factory=set)

    def score(self, shard: Shard, attempt: int) -> ShardOutcome:
        """Score one of this run's shards (see :func:`~shardwise.pipeline.shard.score_shard`)."""
        return score_shard(
            source=self.source,
            plan=self.plan,
            shard=shard,
            model=self.model,
            store=self.store,
            run=self.record,
            attempt=attempt,
            config=self.engine_config,
        )

    def close(self) -> None:
        """Release the source (and its PostgreSQL snapshot) and the store's connections."""
        try:
            self.source.close()
        finally:
            self.store.close()


def open_run_source(spec: RunSpec) -> Source:
    """The spec's source adapter (a SQL table, or a Parquet dataset)."""
    return open_source(
        spec.source, table=spec.table, key=spec.key, text_column=spec.text_column, where=spec.where
    )


def prepare_run(
    spec: RunSpec,
    *,
    run_id: str,
    started_by: str,
    parameters: Mapping[str, Any],
    load_model: ModelLoader,
) -> PreparedRun:
    """Load the model, plan the source (or load a resumed run's stored plan) and record the run."""
    model = load_model(spec.model, resolve_device(spec.device))
    source = open_run_source(spec)
    try:
        if spec.redrive is not None:
            source = _redrive_source(spec, source, model, run_id)
        plan = plan_source(spec, source, model)
        store = ResultStore(spec.results, spec.results_table, model.outputs, _key_type(plan, spec, model))
    except BaseException:
        source.close()
        raise
    try:
        store.ensure_schema()
        record = RunRecord(
            run_id=spec.resume or run_id,
            started_by=started_by,
            parameters=dict(parameters),
            model_name=model.name,
            model_version=model.version,
            code_version=code_version(),
            source_identity=source.identity,
            source_snapshot=plan.snapshot,
            results_table=spec.results_table,
        )
        if spec.resume and store.load_plan(spec.resume) is None:
            raise ConfigError(f"run {spec.resume!r} is not in the ledger of {store.url}; nothing to resume")
        plan = store.start_run(record, plan)
        if is_keyed(plan) and isinstance(source, SqlSource | ParquetSource):
            source = KeyedSource(source, [])  # a resumed redrive: its stored shards name their keys
        done = store.done_shards(record.run_id)
    except BaseException:
        source.close()
        store.close()
        raise
    todo = [s for s in plan.shards if s.shard_id not in done]
    config = EngineConfig(max_tokens=spec.max_tokens)
    return PreparedRun(record, plan, source, store, model, config, todo, done)


def plan_source(spec: RunSpec, source: Source, model: Model) -> SourcePlan:
    """Plan ``source`` as ``spec`` asks; with only-new, leave out what ``model`` already scored."""
    return source.plan(
        shards=spec.shards, rows_per_shard=spec.rows_per_shard, new_only=_new_only(spec, source, model)
    )


def finish_run(prepared: PreparedRun, failed_shards: list[int]) -> RunCounts:
    """Close the run in the ledger; on success, remember which Parquet objects are now scored."""
    status: Literal["completed", "failed"] = "failed" if failed_shards else "completed"
    counts = prepared.store.finish_run(prepared.record.run_id, status)
    # A keyed (redrive) plan read some rows of its objects, not the objects: they are not "seen".
    if status == "completed" and prepared.plan.kind == "parquet" and not is_keyed(prepared.plan):
        prepared.store.record_objects(
            prepared.record.run_id, prepared.record.source_identity, plan_objects(prepared.plan)
        )
    return counts


def score_pending(prepared: PreparedRun, attempt: int = 1) -> RunCounts:
    """Score every pending shard in this thread, then finish the run: the path without an orchestrator.

    A shard that raises is marked failed, the run is finished as failed, and
    the error propagates; the finished shards stay merged, so a later run with
    ``resume`` completes it.
    """
    for shard in prepared.todo:
        try:
            prepared.score(shard, attempt)
        except Exception as exc:
            prepared.store.mark_shard_failed(prepared.record.run_id, shard.shard_id, attempt, str(exc))
            finish_run(prepared, [shard.shard_id])
            raise
    return finish_run(prepared, [])


def _new_only(spec: RunSpec, source: Source, model: Model) -> NewOnly | None:
    if not spec.only_new:
        return None
    if isinstance(source, ParquetSource):
        # The ledger alone answers "which objects were seen"; the key type does not matter to it.
        with ResultStore(spec.results, spec.results_table, model.outputs, "text") as ledger:
            seen = ledger.seen_objects(source.identity)
        return NewOnly(model.version, spec.results_table, seen)
    return NewOnly(model.version, spec.results_table)


def _redrive_source(spec: RunSpec, source: Source, model: Model, run_id: str) -> Source:
    """``source`` restricted to the dead-lettered keys of run ``spec.redrive`` that are to be scored again."""
    assert spec.redrive is not None
    if spec.redrive == run_id:
        raise ConfigError(f"a redrive of run {run_id!r} is a new run: give it another run id")
    with ResultStore(spec.results, spec.results_table, model.outputs, "text") as ledger:
        return redrive_source(ledger, source, spec.redrive, force=spec.force)


def _key_type(plan: SourcePlan, spec: RunSpec, model: Model) -> Literal["int", "text"]:
    key_type = plan.params.get("key_type")
    if key_type in ("int", "text"):
        return key_type  # type: ignore[no-any-return]
    # Nothing was planned (an only-new run with nothing new): no key to store, but the
    # run is still recorded. Match an existing results table so its layout check passes.
    with ResultStore(spec.results, spec.results_table, model.outputs, "text") as probe:
        return probe.existing_key_type() or "text"


def _db_of(url: str) -> str:
    """A URL without its credentials and query, to compare which database two URLs name."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url)
    return f"{parsed.get_backend_name()}://{parsed.host or ''}:{parsed.port or ''}/{parsed.database or ''}"
