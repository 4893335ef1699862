"""Prefect tasks wrapping engine calls: retries, caching, concurrency, logging and artifacts live here."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import lazy_exports

if TYPE_CHECKING:
    from shardwise.tasks.infer_shard import infer_shard
    from shardwise.tasks.plan_run import plan_run
    from shardwise.tasks.retry import retry_transient

__all__ = ["infer_shard", "plan_run", "retry_transient"]

__getattr__ = lazy_exports(
    __name__,
    {
        ".infer_shard": ("infer_shard",),
        ".plan_run": ("plan_run",),
        ".retry": ("retry_transient",),
    },
)
