"""Values round-trip exactly on both backends: float32 vectors, int and text keys, UTC timestamps."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from results_helpers import DIM, make_plan, make_rows, make_run, make_store, write_shard

from shardwise.db.codec import decode_timestamp, timestamp_param
from shardwise.model import OutputColumn
from shardwise.records import ResultRow


def _awkward_vectors() -> list[np.ndarray]:
    info = np.finfo(np.float32)
    special = np.array([0.0, -0.0, info.tiny, -info.max, info.max, 1e-45, 1 / 3, np.pi], np.float32)
    rng = np.random.default_rng(7)
    return [special, *rng.standard_normal((5, DIM)).astype(np.float32), np.full(DIM, np.nan, np.float32)]


def test_vectors_round_trip_bit_for_bit(db_url: str) -> None:
    vectors = _awkward_vectors()
    with make_store(db_url) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        rows = [
            ResultRow(i, {**make_rows([i])[0].values, "embedding": v}, f"fp{i}")
            for i, v in enumerate(vectors)
        ]
        assert write_shard(store, run, 0, rows)
        got = [r["embedding"] for r in store.read_results()]
    assert all(g.dtype == np.float32 for g in got)
    assert [g.tobytes() for g in got] == [v.tobytes() for v in vectors]


def test_float64_vectors_are_stored_as_float32(db_url: str) -> None:
    with make_store(db_url) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        v64 = np.linspace(0, 1, DIM)
        assert write_shard(
            store, run, 0, [ResultRow(1, {**make_rows([1])[0].values, "embedding": v64}, "fp")]
        )
        assert np.array_equal(store.read_results()[0]["embedding"], v64.astype(np.float32))


def test_text_keys_and_null_outputs(db_url: str) -> None:
    outputs = (OutputColumn("embedding", "vector", 3), OutputColumn("label", "text"))
    keys = ["b", "a", "naïve 🙂", "with\ttab", "0"]
    with make_store(db_url, table="docs_text", key_type="text", outputs=outputs) as store:
        store.ensure_schema()
        run = make_run(table="docs_text")
        store.ledger.start_run(run, make_plan())
        rows = [ResultRow(k, {"embedding": [1.0, 2.0, 3.0], "label": None}, f"fp-{k}") for k in keys]
        assert write_shard(store, run, 0, rows).inserted == len(keys)
        got = store.read_results()
    assert sorted(r["source_key"] for r in got) == sorted(keys)
    assert all(r["label"] is None and r["embedding"].tolist() == [1.0, 2.0, 3.0] for r in got)


def test_large_int_keys(db_url: str) -> None:
    keys = [-(2**63), 0, 2**63 - 1]
    with make_store(db_url) as store:
        store.ensure_schema()
        run = make_run()
        store.ledger.start_run(run, make_plan())
        assert write_shard(store, run, 0, make_rows(keys))
        assert [r["source_key"] for r in store.read_results()] == keys


@pytest.mark.parametrize("dialect", ["postgresql", "sqlite"])
def test_timestamps_are_utc(dialect: str) -> None:
    local = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    stored = timestamp_param(dialect, local)
    back = decode_timestamp(stored)
    assert back == local and back is not None and back.tzinfo == timezone.utc
    assert decode_timestamp(timestamp_param(dialect, datetime(2024, 5, 1))) == datetime(
        2024, 5, 1, tzinfo=timezone.utc
    )
