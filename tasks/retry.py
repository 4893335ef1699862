"""Which failures a task retries, and how: transient ones only, as the run's :class:`RetryPolicy` says.

The policy's ``attempts`` are the task's tries, its backoff the waits between
them (jittered by Prefect with the policy's ``jitter``). The deadline is not
Prefect's business: a shard that outlasted it raises
:class:`~shardwise.errors.RetryDeadlineError`, which is not a
:class:`~shardwise.errors.TransientError`, so :func:`retry_transient` refuses
it and the task's retries never multiply the deadline.
"""

from __future__ import annotations

from typing import Any

from prefect.cache_policies import NO_CACHE

from shardwise.errors import TransientError
from shardwise.retry_policy import RetryPolicy

__all__ = ["TRANSIENT_RETRIES", "retry_transient", "task_retries"]


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry a dropped connection, throttling or OOM; fail fast otherwise."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:
        return False
    return False


def task_retries(policy: RetryPolicy) -> dict[str, Any]:
    """``@task`` / ``with_options`` keywords that retry transient failures as ``policy`` says."""
    delays = policy.task_delays()
    return {
        "retries": policy.attempts - 1,
        "retry_delay_seconds": delays or 0,
        "retry_jitter_factor": policy.jitter,
        "retry_condition_fn": retry_transient,
        # The ledger in the results database decides what is done; Prefect's cache must not.
        "cache_policy": NO_CACHE,
    }


TRANSIENT_RETRIES: dict[str, Any] = task_retries(RetryPolicy())
"""The default policy's task options, for the decorators of the tasks that touch databases and
sources (plan-run, infer-shard); a run applies its own with ``task.with_options(**task_retries(policy))``."""
