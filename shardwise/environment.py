"""The environment every Shardwise entry point sets up, unless the user already set it.

One home for these defaults: the CLI, the benchmarks and the test suite call
:func:`set_defaults` before anything imports Prefect or a tokenizer, since
both read their settings at import time. Only names are set here; nothing is
imported.
"""

from __future__ import annotations

import os

__all__ = ["LOCAL_PREFECT", "OFFLINE", "set_defaults"]

OFFLINE = {
    # Weights are always local: never let a library reach for a hub.
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Models load from local files only, quietly, without tokenizer threads fighting torch's."""

LOCAL_PREFECT = {
    # A cold temporary Prefect server needs longer than the default 20 s to start.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
}
"""A temporary Prefect server that starts on a slow machine and sends no telemetry."""


def set_defaults(*, prefect: bool = True, **extra: str) -> None:
    """Set :data:`OFFLINE`, :data:`LOCAL_PREFECT` (with ``prefect``) and ``extra`` where unset."""
    for name, value in {**OFFLINE, **(LOCAL_PREFECT if prefect else {}), **extra}.items():
        os.environ.setdefault(name, value)
