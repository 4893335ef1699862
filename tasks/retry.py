"""Which failures a task retries, and how: transient ones only, with jittered exponential backoff."""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from shardwise.errors import TransientError

__all__ = ["TRANSIENT_RETRIES", "retry_transient"]


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry a dropped connection, throttling or OOM; fail fast otherwise."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:
        return False
    return False


TRANSIENT_RETRIES: dict[str, Any] = {
    "retry_delay_seconds": exponential_backoff(backoff_factor=2),
    "retry_jitter_factor": 0.5,
    "retry_condition_fn": retry_transient,
    # The ledger in the results database decides what is done; Prefect's cache must not.
    "cache_policy": NO_CACHE,
}
"""The retry policy of the tasks that touch databases and sources (plan-run, infer-shard): pass it to
``@task`` with the task's own ``retries``."""
