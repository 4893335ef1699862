"""One Parquet source, three destinations, one ledger: only-new skips the objects scored into the
destination it writes, not those another destination scored (issue 39, item 13)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from spec_builder import flat_spec

from shardwise.pipeline import RunSpec
from shardwise.results import Ledger


def _write(folder: Path, name: str, first: int) -> None:
    ids = pa.array(range(first, first + 3), pa.int64())
    texts = pa.array([f"paragraph number {i}, about nothing" for i in range(first, first + 3)])
    pq.write_table(pa.table({"id": ids, "text": texts}), folder / name)


def _names(pairs: frozenset[tuple[str, str]]) -> set[str]:
    return {Path(key).name for key, _ in pairs}


def test_only_new_into_one_destination_leaves_another_its_own(
    tmp_path: Path, sqlite_url: str, pipeline: Any
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    _write(data, "a.parquet", 0)
    _write(data, "b.parquet", 100)
    into_a = flat_spec(model="tiny", source=str(data), results=sqlite_url, results_table="a", only_new=True)
    into_b = flat_spec(model="tiny", source=str(data), results=sqlite_url, results_table="b", only_new=True)
    lake = tmp_path / "lake"
    into_lake = flat_spec(
        model="tiny",
        source=str(data),
        results=str(lake),
        results_table="scores",
        results_format="parquet",
        ledger=sqlite_url,  # the one ledger of the three destinations
        only_new=True,
    )

    def scored(spec: RunSpec, run_id: str) -> int:
        return int(pipeline.run(spec, run_id)[1].rows_in)

    assert scored(into_a, "a-1") == 6
    assert scored(into_b, "b-1") == 6, "table b has none of the rows table a scored"
    assert scored(into_lake, "lake-1") == 6, "nor has the lake"
    assert (scored(into_a, "a-2"), scored(into_b, "b-2"), scored(into_lake, "lake-2")) == (0, 0, 0)

    _write(data, "c.parquet", 200)
    assert scored(into_a, "a-3") == 3
    with Ledger(sqlite_url) as ledger:  # a watcher's view: c.parquet is not scored everywhere yet
        identity = str(data.resolve())
        assert _names(ledger.seen_objects(identity, "a")) == {"a.parquet", "b.parquet", "c.parquet"}
        assert _names(ledger.seen_objects(identity, None)) == {"a.parquet", "b.parquet"}
    assert (scored(into_b, "b-3"), scored(into_lake, "lake-3")) == (3, 3)
    with Ledger(sqlite_url) as ledger:
        assert _names(ledger.seen_objects(identity, None)) == {"a.parquet", "b.parquet", "c.parquet"}
