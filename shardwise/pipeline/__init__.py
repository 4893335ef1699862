"""The scoring pipeline without an orchestrator: plan a run, score its shards on workers, finish it.

:mod:`~shardwise.pipeline.prepare` is the planning side (one process holds
the plan and the snapshot), :mod:`~shardwise.pipeline.worker` the worker side
(any process, any machine, given a :class:`RunRef` and a shard id).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import DECLARED, lazy_exports

if TYPE_CHECKING:
    from shardwise.pipeline.checks import check_run
    from shardwise.pipeline.chunks import DEFAULT_CHUNK_ROWS, ChunkConfig
    from shardwise.pipeline.dryrun import plan_report
    from shardwise.pipeline.lease import LEASE_S, LeaseKeeper, Takeover, takeover_from
    from shardwise.pipeline.prepare import PlannedRun, finish_results, finish_run, prepare_run, score_pending
    from shardwise.pipeline.progress import ProgressReading, read_progress
    from shardwise.pipeline.redrive import RedriveSelection, redrive_keys, redrive_source
    from shardwise.pipeline.run_precision import PrecisionChoice, choose_precision, hardware_precision, warm
    from shardwise.pipeline.shard import PROGRESS_EVERY_S, ShardOutcome, WorkerInfo, score_shard, this_worker
    from shardwise.pipeline.source_plan import SHARDS_PER_WORKER, plan_source
    from shardwise.pipeline.spec import (
        ModelChoice,
        Resolver,
        ResultsSpec,
        RunRef,
        RunSettings,
        RunSpec,
        SourceSpec,
        as_is,
    )
    from shardwise.pipeline.worker import Catalogue, WorkerCache, open_spec_source, score_ref_shard

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "LEASE_S",
    "PROGRESS_EVERY_S",
    "SHARDS_PER_WORKER",
    "Catalogue",
    "ChunkConfig",
    "LeaseKeeper",
    "ModelChoice",
    "PlannedRun",
    "PrecisionChoice",
    "ProgressReading",
    "RedriveSelection",
    "Resolver",
    "ResultsSpec",
    "RunRef",
    "RunSettings",
    "RunSpec",
    "ShardOutcome",
    "SourceSpec",
    "Takeover",
    "WorkerCache",
    "WorkerInfo",
    "as_is",
    "check_run",
    "choose_precision",
    "finish_results",
    "finish_run",
    "hardware_precision",
    "open_spec_source",
    "plan_report",
    "plan_source",
    "prepare_run",
    "read_progress",
    "redrive_keys",
    "redrive_source",
    "score_pending",
    "score_ref_shard",
    "score_shard",
    "takeover_from",
    "this_worker",
    "warm",
]

__getattr__ = lazy_exports(
    __name__,
    {
        ".checks": ("check_run",),
        ".chunks": ("DEFAULT_CHUNK_ROWS", "ChunkConfig"),
        ".dryrun": ("plan_report",),
        ".lease": ("LEASE_S", "LeaseKeeper", "Takeover", "takeover_from"),
        ".prepare": ("PlannedRun", "finish_results", "finish_run", "prepare_run", "score_pending"),
        ".progress": ("ProgressReading", "read_progress"),
        ".redrive": ("RedriveSelection", "redrive_keys", "redrive_source"),
        ".run_precision": ("PrecisionChoice", "choose_precision", "hardware_precision", "warm"),
        ".shard": ("PROGRESS_EVERY_S", "ShardOutcome", "WorkerInfo", "score_shard", "this_worker"),
        ".source_plan": ("SHARDS_PER_WORKER", "plan_source"),
        ".spec": DECLARED,
        ".worker": ("Catalogue", "WorkerCache", "open_spec_source", "score_ref_shard"),
    },
)
