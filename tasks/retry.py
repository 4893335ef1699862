"""Which failures a shard task retries: transient ones only."""

from __future__ import annotations

from typing import Any

from shardwise.errors import TransientError

__all__ = ["retry_transient"]


def retry_transient(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect ``retry_condition_fn``: retry a dropped connection, throttling or OOM; fail fast otherwise."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:
        return False
    return False
