"""The environment every Shardwise entry point sets up, unless the user already set it.

One home for these defaults: the CLI, the benchmarks and the test suite call
:func:`set_defaults` before anything imports Prefect or a tokenizer, since
both read their settings at import time. Only names are set here; nothing is
imported.
"""

from __future__ import annotations

import os

__all__ = ["LOCAL_PREFECT", "OFFLINE", "ONEDNN_CACHES", "set_defaults"]

OFFLINE = {
    # Weights are always local: never let a library reach for a hub.
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
"""Models load from local files only, quietly, without tokenizer threads fighting torch's."""

ONEDNN_CACHES = {
    # oneDNN's primitive cache and ideep's cache in front of it (bf16 matrix products on a CPU) each
    # keep up to 1024 primitives, one per batch shape, with their buffers. The engine's batches come in
    # hundreds of shapes (rows x longest row), so a worker grew by about 800 MiB (bench/memory.py); 16
    # of each cost the same CPU time as 1024 on that bench. Caching never changes a primitive's result.
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "16",
    "LRU_CACHE_CAPACITY": "16",
}
"""Bounded oneDNN caches: read when torch first runs a primitive, so set before any worker starts."""

LOCAL_PREFECT = {
    # A cold temporary Prefect server needs longer than the default 20 s to start.
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "120",
    # Prefect's two telemetry switches, as its notice names them: the server's analytics, and the
    # client's. Without DO_NOT_TRACK, importing Prefect on a terminal with a new Prefect home prints
    # "Prefect collects anonymous usage data ..." to stderr, whatever the server's setting.
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
}
"""A temporary Prefect server that starts on a slow machine, and no telemetry from server or client."""


def set_defaults(*, prefect: bool = True, **extra: str) -> None:
    """Set :data:`OFFLINE`, :data:`ONEDNN_CACHES`, :data:`LOCAL_PREFECT` (with ``prefect``) and ``extra``
    where unset. Worker processes started after this (a process pool, a local Dask or Ray) inherit them."""
    for name, value in {**OFFLINE, **ONEDNN_CACHES, **(LOCAL_PREFECT if prefect else {}), **extra}.items():
        os.environ.setdefault(name, value)
