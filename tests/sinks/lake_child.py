"""A writer the Delta sink tests start as a process of its own.

``python lake_child.py race LOCATION TABLE RUN_ID GATE``: one run's commit
of chunk 0 of shard 0 (keys 0..49) to a Delta table, held at a gate: once
the sink has read the table (the keys it holds), the writer creates
``GATE/RUN_ID.waiting`` and waits until ``GATE/go`` exists, so two such
writers read the same version of the table before either commits. Prints
the commit's record as JSON. The test hook is this process's alone: the
sink's code is unchanged, one of its reads is wrapped here.

S3 settings come from the environment, as a worker's do.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from shardwise.sinks.delta.sink import DeltaSink
from shardwise.testing.rows import LAYOUT, chunk


def held_at(gate: Path, name: str, read: Any) -> Any:
    """``read``, after which the first call waits at the gate (see the module docstring)."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        found = read(*args, **kwargs)
        if not (gate / "go").exists():
            (gate / f"{name}.waiting").touch()
            while not (gate / "go").exists():
                time.sleep(0.01)
        return found

    return wrapper


def race(location: str, table: str, run_id: str, gate: Path) -> None:
    sink = DeltaSink(location, table, LAYOUT)
    sink.ensure()
    DeltaSink._existing = held_at(gate, run_id, DeltaSink._existing)  # type: ignore[method-assign]
    done = sink.commit(chunk(0, run_id=run_id, keys=range(50)))
    print(json.dumps({"status": done.status, "counts": [done.inserted, done.updated, done.unchanged]}))


def main() -> None:
    assert sys.argv[1] == "race", sys.argv
    race(sys.argv[2], sys.argv[3], sys.argv[4], Path(sys.argv[5]))


if __name__ == "__main__":
    main()
