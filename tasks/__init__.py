"""Prefect tasks wrapping engine calls: retries, caching, concurrency, logging and artifacts live here."""

from __future__ import annotations

from tasks.infer_shard import infer_shard
from tasks.plan_run import plan_run
from tasks.retry import retry_transient

__all__ = ["infer_shard", "plan_run", "retry_transient"]
