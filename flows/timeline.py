"""Phase marks of one ``shardwise`` process, for ``bench/whole.py``: where its fixed cost goes.

With ``SHARDWISE_TIMELINE=FILE`` set, :func:`mark` appends one JSON line per
phase (``{"phase": "parsed", "at": <epoch seconds>}``); unset, it does
nothing. The run's ledger records the rest (the run planned, each shard's
first and last batch, the run finished), so only what happens before the flow
starts is marked here: the command parsed (its imports done), Prefect's
server up, the model loaded and its precision checked.
"""

from __future__ import annotations

import json
import os
import time

__all__ = ["TIMELINE", "mark"]

TIMELINE = "SHARDWISE_TIMELINE"
"""The environment variable naming the file the marks go to."""


def mark(phase: str) -> None:
    """Append ``phase`` and the time now to the timeline file, if one is set."""
    path = os.environ.get(TIMELINE)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps({"phase": phase, "at": time.time()}) + "\n")
