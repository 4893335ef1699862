"""A Parquet-sink run that the leftover tests start as a process of its own and hold mid-commit.

``python parquet_run_child.py SPEC_JSON RUN_ID POINT GATE``: plans and
scores the run (``prepare_run`` + ``score_pending``, no orchestrator, the
ledger and lease as a real run holds them). At the write of chunk
:data:`HOLD` of shard 0 it stops at ``POINT``:

* ``temp``: the chunk's data file is written under ``_tmp/`` and not yet
  renamed (on S3: copied) into ``data/``;
* ``unlisted``: the data file is in ``data/`` and the manifest entry that
  commits it is not yet created;

then creates ``GATE/held`` and waits until ``GATE/go`` exists (the kill -9
tests never create it: they SIGKILL the process there), and goes on. The
hook is this process's alone: the sink's code is unchanged, one call of its
file layer (locally) or of its S3 client is wrapped here.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
from spec_builder import flat_spec

from shardwise.models import get_spec
from shardwise.pipeline import WorkerCache, finish_results, prepare_run, score_pending
from shardwise.sinks.lake_files import LocalFiles, S3Files

HOLD = "s00000-c00002"
"""Shard 0's third chunk: two chunks of the run are committed before it stops."""


def hold(gate: Path) -> None:
    (gate / "held").touch()
    while not (gate / "go").exists():
        time.sleep(0.01)


def install(point: str, gate: Path) -> None:
    """Wrap the file layer so the write of chunk HOLD stops at ``point`` (see the module docstring)."""
    temp, create, s3_init = LocalFiles._temp, LocalFiles.create, S3Files.__init__

    def temp_then_hold(self: LocalFiles, body: bytes, name: str) -> Path:
        written = temp(self, body, name)
        if point == "temp" and name.startswith("data/") and HOLD in name:
            hold(gate)
        return written

    def hold_then_create(self: LocalFiles, name: str, body: bytes) -> bool:
        if point == "unlisted" and HOLD in name:
            hold(gate)
        return create(self, name, body)

    def held_client(self: S3Files, client: Any, *args: Any) -> None:
        s3_init(self, _HeldClient(client, point, gate), *args)

    LocalFiles._temp = temp_then_hold  # type: ignore[method-assign]
    LocalFiles.create = hold_then_create  # type: ignore[method-assign]
    S3Files.__init__ = held_client  # type: ignore[method-assign]


class _HeldClient:
    """An S3 client whose copy of chunk HOLD's data file (``temp``) or create of its entry
    (``unlisted``) waits at the gate first."""

    def __init__(self, client: Any, point: str, gate: Path) -> None:
        self._client, self._point, self._gate = client, point, gate

    def copy_object(self, **kwargs: Any) -> Any:
        if self._point == "temp" and HOLD in kwargs["Key"]:
            hold(self._gate)
        return self._client.copy_object(**kwargs)

    def put_object(self, **kwargs: Any) -> Any:
        if self._point == "unlisted" and "IfNoneMatch" in kwargs and HOLD in kwargs["Key"]:
            hold(self._gate)
        return self._client.put_object(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def main() -> None:
    spec = flat_spec(**json.loads(sys.argv[1]))
    run_id, point, gate = sys.argv[2], sys.argv[3], Path(sys.argv[4])
    torch.set_num_threads(1)
    install(point, gate)
    cache = WorkerCache(get_spec)
    planned = prepare_run(
        spec,
        run_id=run_id,
        started_by="test",
        parameters={},
        model=get_spec(spec.model.name).describe(),
        cache=cache,
    )
    try:
        score_pending(planned, cache)
        finish_results(planned)
    finally:
        planned.close()
        cache.close()
    print("done", run_id, flush=True)


if __name__ == "__main__":
    main()
