"""The rows, chunks and layouts the sink contract commits (:mod:`shardwise.testing.sink`).

Every output kind is there (a float32 vector whose values float32 cannot round, a float, a count, text
and JSON with a non-ASCII key), so a sink that loses a value in storage is caught reading it back.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from shardwise.model import OutputColumn
from shardwise.records import ResultRow
from shardwise.sinks import Lineage
from shardwise.sinks.base import Layout, SinkChunk

__all__ = ["LAYOUT", "OTHER_LAYOUT", "ROWS_PER_CHUNK", "chunk", "lineage", "row", "vector"]

DIM = 8
LAYOUT = Layout(
    outputs=(
        OutputColumn("embedding", "vector", dim=DIM),
        OutputColumn("score", "float"),
        OutputColumn("tokens", "int", count=True),
        OutputColumn("label", "text"),
        OutputColumn("extra", "json"),
    ),
    key_type="int",
)
OTHER_LAYOUT = Layout(outputs=(OutputColumn("embedding", "vector", dim=DIM),), key_type="text")
ROWS_PER_CHUNK = 50


def vector(key: int, salt: str = "") -> np.ndarray:
    """A float32 vector that differs per key (and per salt), with values float32 cannot round."""
    seed = key * 7919 + sum(map(ord, salt))
    return np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)


def row(key: int, fingerprint: str = "fp", salt: str = "") -> ResultRow:
    values = {
        "embedding": vector(key, salt),
        "score": key / 3,
        "tokens": key,
        "label": f"k{key}{salt}",
        "extra": {"key": key, "salt": salt, "ü": [1, 2]},
    }
    return ResultRow(key=key, values=values, input_fingerprint=fingerprint, truncated=key % 2 == 0)


def lineage(run_id: str = "run-a", shard_id: int = 0, model_version: str = "v1") -> Lineage:
    return Lineage(
        model_name="tiny",
        model_version=model_version,
        code_version="code-1",
        input_snapshot=None,
        run_id=run_id,
        shard_id=shard_id,
        scored_at=datetime.now(timezone.utc),
    )


def chunk(
    number: int,
    *,
    shard_id: int = 0,
    run_id: str = "run-a",
    keys: range | None = None,
    fingerprint: str = "fp",
    model_version: str = "v1",
    salt: str = "",
) -> SinkChunk:
    """Chunk ``number`` of a shard: by default keys shard*10000 + number*ROWS_PER_CHUNK onwards."""
    if keys is None:
        start = shard_id * 10_000 + number * ROWS_PER_CHUNK
        keys = range(start, start + ROWS_PER_CHUNK)
    rows = [row(k, fingerprint, salt) for k in keys]
    position = {"rows": (number + 1) * len(rows), "key": keys[-1] if len(keys) else None}
    return SinkChunk(
        run_id=run_id,
        shard_id=shard_id,
        number=number,
        rows=rows,
        lineage=lineage(run_id, shard_id, model_version),
        position=position,
    )
