"""Lineage without riding in the engine's key: fingerprints are joined back to results by input position."""

from __future__ import annotations

import pytest

from shardwise.batch.config import EngineConfig
from shardwise.batch.engine import Engine, RowResult
from shardwise.lineage import value_fingerprint
from shardwise.pipeline.chunks import InputFingerprints
from shardwise.sources.base import SourceRow


def test_each_result_gets_its_own_rows_fingerprint_and_key(tiny_model) -> None:
    rows = [SourceRow(k, f"text number {k} " * (k % 9 + 1)) for k in range(0, 300, 3)]
    rows[7] = SourceRow(21, None)  # a dead letter keeps its place and its (absent) fingerprint
    fingerprints = InputFingerprints()
    engine = Engine(tiny_model, EngineConfig(window_rows=32))
    seen = 0
    for key, result, fingerprint in fingerprints.joined(engine.run(fingerprints.feed(rows))):
        row = rows[seen]
        assert (key, result.key, fingerprint) == (row.key, row.key, value_fingerprint(row.value))
        assert result.ok == (row.value is not None)
        seen += 1
        assert len(fingerprints._fed) <= 2 * 32, "only rows in flight are held"
    assert seen == len(rows)


def test_a_result_out_of_input_order_stops_the_shard() -> None:
    fingerprints = InputFingerprints()
    fed = list(fingerprints.feed([SourceRow(1, "a"), SourceRow(2, "b")]))
    assert fed == [(1, "a"), (2, "b")]
    swapped = [RowResult(2, {"x": 1}), RowResult(1, {"x": 1})]
    with pytest.raises(RuntimeError, match="returned key 2 where row 1 was fed"):
        list(fingerprints.joined(swapped))
