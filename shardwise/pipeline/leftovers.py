"""As a run starts, its sink deletes what writers killed mid-commit left behind, judged by the ledger.

Only a sink whose commit can leave something half-made does anything (Parquet
files: temporary files, data files no manifest entry lists; see
:mod:`shardwise.sinks.parquet.leftovers`); the ledger says which runs are over
(:meth:`~shardwise.results.Ledger.run_over`), so a live writer's files, of a
run started elsewhere at the same moment, are never touched. Tidying is
housekeeping: when it fails, the run goes on and says so, and the next run
tries again.
"""

from __future__ import annotations

import logging

from shardwise.errors import ShardwiseError
from shardwise.results import Ledger
from shardwise.sinks import Sink

__all__ = ["tidy_leftovers"]

_log = logging.getLogger(__name__)


def tidy_leftovers(ledger: Ledger, sink: Sink) -> list[str]:
    """What the sink deleted of runs the ledger says are over, a line each; a failure is one line too."""
    try:
        return sink.tidy(ledger.run_over)
    except (ShardwiseError, OSError) as exc:  # OSError: a local file it may not delete
        _log.warning("tidying %s failed; the next run tries again: %s", sink.target, exc)
        return [f"tidying what killed writers left in {sink.target} failed (the next run tries again): {exc}"]
