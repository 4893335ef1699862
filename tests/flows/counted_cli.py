"""Run the ``shardwise`` command line with every forward pass counted, and paced.

``python counted_cli.py COUNTS ROWS_PER_S shardwise-arguments...``: each batch
the engine scores (each window a self-batching model such as vLLM's scores:
the rows it generated, not those it refused) appends its row count to the
file ``COUNTS`` (written at once, so a SIGKILL loses none), then waits so
that scoring runs at no more than ``ROWS_PER_S`` rows a second (0: no
limit). The pace lets a test see a
shard's progress before it ends; the counts tell it exactly how many rows
went through the model. The shards run in this process (the thread runner).

``COUNTED_CHUNK_ROWS`` in the environment makes each shard commit every that
many rows instead of every :data:`~shardwise.pipeline.DEFAULT_CHUNK_ROWS`:
a run of a few dozen generated rows then commits several chunks, as a big
run of embeddings does.
"""

from __future__ import annotations

import os
import runpy
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from shardwise.batch.engine import EngineRun


def _counting(counts: str, rows_per_s: float) -> None:
    fd = os.open(counts, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    score, self_batched = EngineRun._score, EngineRun._self_batched

    def counted(self: EngineRun, batch: Any, *args: Any) -> None:
        started = time.perf_counter()
        score(self, batch, *args)
        _done(len(batch.positions), started)

    def _done(rows: int, started: float) -> None:
        os.write(fd, f"{rows}\n".encode())
        if rows_per_s > 0:
            time.sleep(max(0.0, rows / rows_per_s - (time.perf_counter() - started)))

    class _Counted:
        """The self-batching model, each window counted and paced."""

        def __init__(self, model: Any) -> None:
            self._model = model

        def __getattr__(self, name: str) -> Any:
            return getattr(self._model, name)

        def score_window(self, values: Sequence[object]) -> Any:
            started = time.perf_counter()
            outcomes = self._model.score_window(values)
            _done(sum(isinstance(o, Mapping) for o in outcomes), started)
            return outcomes

    def counted_windows(self: EngineRun, rows: Any, model: Any) -> Any:
        return self_batched(self, rows, _Counted(model))

    EngineRun._score = counted  # type: ignore[method-assign]
    EngineRun._self_batched = counted_windows  # type: ignore[method-assign]


def _chunking(rows: int) -> None:
    from shardwise.pipeline import worker
    from shardwise.pipeline.chunks import ChunkConfig

    worker.ChunkConfig = lambda _rows: ChunkConfig(rows)  # type: ignore[assignment,misc]


if __name__ == "__main__":
    counts, rows_per_s, *argv = sys.argv[1:]
    _counting(counts, float(rows_per_s))
    if os.environ.get("COUNTED_CHUNK_ROWS"):
        _chunking(int(os.environ["COUNTED_CHUNK_ROWS"]))
    sys.argv = ["shardwise", *argv]
    runpy.run_module("shardwise.flows.cli", run_name="__main__", alter_sys=True)
