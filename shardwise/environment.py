"""The environment every Shardwise entry point sets up, unless the user already set it.

One home for these defaults: the CLI, the benchmarks and the test suite call
:func:`set_defaults` before anything imports Prefect or a tokenizer, since
both read their settings at import time. Only names (and a logger's level) are
set here; nothing is imported.
"""

from __future__ import annotations

import logging
import os

__all__ = ["ENGINE_LOGS", "LOCAL_PREFECT", "OFFLINE", "ONEDNN_CACHES", "engine_logs", "set_defaults"]

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


ENGINE_LOGS = {
    # vLLM logs its start and shutdown at INFO (about 190 lines a run) and its platform's quirks at
    # WARNING (no Triton on a CPU), to stdout, from this process and from its engine's, which reads these
    # when it starts: stdout is for the command's own output (a --json line), and a failure reaches the
    # user as Shardwise's own error, so only errors show, on stderr. -v, or a level of the user's, shows
    # the rest.
    "VLLM_LOGGING_LEVEL": "ERROR",
    "VLLM_LOGGING_STREAM": "ext://sys.stderr",
}
"""Engines' logs: errors only, on stderr, unless asked for (:func:`engine_logs`)."""

_SET_HERE: set[str] = set()
"""The names :func:`set_defaults` set (the user had not): :func:`engine_logs` may change those only."""


def set_defaults(*, prefect: bool = True, **extra: str) -> None:
    """Set :data:`OFFLINE`, :data:`ONEDNN_CACHES`, :data:`ENGINE_LOGS`, :data:`LOCAL_PREFECT` (with
    ``prefect``) and ``extra`` where unset. Worker processes started after this (a process pool, a local
    Dask or Ray, an engine's process) inherit them."""
    given = {**OFFLINE, **ONEDNN_CACHES, **ENGINE_LOGS, **(LOCAL_PREFECT if prefect else {}), **extra}
    for name, value in given.items():
        if name not in os.environ:
            os.environ[name] = value
            _SET_HERE.add(name)


def engine_logs(verbose: bool) -> None:
    """Engines log at INFO when ``verbose`` (``-v``), else their errors only; a level the user set stays
    as it is. Set for the engines' processes started from now on, and for this process's ``vllm``
    logger, which logs as vLLM is imported, before vLLM applies its own level."""
    if "VLLM_LOGGING_LEVEL" in _SET_HERE:
        os.environ["VLLM_LOGGING_LEVEL"] = "INFO" if verbose else ENGINE_LOGS["VLLM_LOGGING_LEVEL"]
    level = logging.getLevelName(os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper())
    logging.getLogger("vllm").setLevel(level if isinstance(level, int) else logging.INFO)
