"""Reads that resume a shard after its committed chunks: a key position (SQL), a row offset (Parquet)."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa

from shardwise.errors import ConfigError
from shardwise.sources import KeyedSource, ParquetSource
from shardwise.sources.base import ReadFrom
from shardwise.sources.sql.source import SqlSource


def _write(path: Path, keys: list[int | None], row_group_size: int, *, statistics: bool = True) -> None:
    texts = [f"text of {k}" for k in keys]
    table = pa.table({"id": pa.array(keys, pa.int64()), "text": texts})
    pq.write_table(table, path, row_group_size=row_group_size, write_statistics=statistics)


@pytest.fixture
def parquet_dir(tmp_path: Path) -> Path:
    """Two files of 70-row row groups; some keys are null (skipped by every read), one file has no stats."""
    rng = random.Random(7)
    first = [None if rng.random() < 0.1 else i for i in range(300)]
    second = [None if rng.random() < 0.1 else i for i in range(300, 500)]
    _write(tmp_path / "a.parquet", first, 70)
    _write(tmp_path / "b.parquet", second, 70, statistics=False)
    return tmp_path


def test_a_parquet_read_that_skips_rows_yields_the_rest_in_order(parquet_dir: Path) -> None:
    source = ParquetSource(str(parquet_dir))
    plan = source.plan(shards=1)
    (shard,) = plan.shards
    every = [(r.key, r.value) for r in source.read(plan, shard)]
    keyed = [
        k for name in ("a", "b") for k in pq.read_table(parquet_dir / f"{name}.parquet")["id"].to_pylist()
    ]
    assert [k for k, _ in every] == [k for k in keyed if k is not None]
    for skip in (0, 1, 62, 63, 64, 200, len(every) - 1, len(every), len(every) + 5):
        rows = source.read(plan, shard, skip=skip)
        assert [(r.key, r.value) for r in rows] == every[skip:], skip
        assert rows.skipped == min(skip, len(every))


def test_a_parquet_skip_passes_whole_row_groups_over_unread(parquet_dir: Path) -> None:
    source = ParquetSource(str(parquet_dir))
    plan = source.plan(shards=1)
    (shard,) = plan.shards
    keys = pq.read_table(parquet_dir / "a.parquet")["id"].to_pylist()
    groups = [keys[i : i + 70] for i in range(0, len(keys), 70)]
    passed, skipped = 0, 0
    while skipped + sum(k is not None for k in groups[passed]) <= 200:
        skipped += sum(k is not None for k in groups[passed])
        passed += 1
    assert passed >= 2
    rows = source.read(plan, shard, skip=200)
    first = next(rows)
    assert first.key == [k for k in keys if k is not None][200]
    # Row groups wholly before row 200 were passed over by their footers, unread: their null keys
    # were never met. Only the nulls of the row group the read starts in were.
    read = groups[passed][: groups[passed].index(first.key)]
    assert rows.null_keys == sum(k is None for k in read)
    with pytest.raises(ConfigError, match="skip must be a number of rows >= 0"):
        source.read(plan, shard, skip=-1)


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_sql_read_after_a_key_starts_above_it_within_the_shard(
    request: pytest.FixtureRequest, dialect: str
) -> None:
    url = str(request.getfixturevalue("sqlite_url" if dialect == "sqlite" else "pg_url"))
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table docs (id bigint primary key, text text)"))
        conn.execute(
            sa.text("insert into docs values (:id, :text)"),
            [{"id": i * 3, "text": f"t{i}"} for i in range(100)],
        )
    engine.dispose()
    with SqlSource(url, "docs", "id", "text") as source:
        plan = source.plan(shards=3)
        shard = plan.shards[1]
        with source.open_reader(plan, shard) as reader:
            keys = [r.key for r in reader.rows]
        for after in (keys[0], keys[10], keys[-1], keys[10] + 1):
            start = ReadFrom(rows=sum(k <= after for k in keys), key=after)
            with source.open_reader(plan, shard, start) as reader:
                assert [r.key for r in reader.rows] == [k for k in keys if k > after]
        with source.open_reader(plan, shard, ReadFrom(rows=5)) as reader:
            assert [r.key for r in reader.rows] == keys[5:], "without a key, the committed rows are dropped"


def test_every_source_resumes_through_open_reader(parquet_dir: Path) -> None:
    """The pipeline reads every kind of source one way: Parquet skips rows, a keyed source drops them."""
    source = ParquetSource(str(parquet_dir))
    plan = source.plan(shards=1)
    (shard,) = plan.shards
    every = [r.key for r in source.read(plan, shard)]
    with source.open_reader(plan, shard, ReadFrom(rows=62, key=every[61])) as reader:
        assert reader.snapshot == plan.snapshot and not reader.snapshot_lost
        assert [r.key for r in reader.rows] == every[62:]
    chosen = [k for k in every if isinstance(k, int) and k % 7 == 0]
    with KeyedSource(ParquetSource(str(parquet_dir)), chosen) as keyed:
        keyed_plan = keyed.plan(shards=1)
        (keyed_shard,) = keyed_plan.shards
        whole = [r.key for r in keyed.read(keyed_plan, keyed_shard)]
        assert sorted(whole) == sorted(chosen)
        with keyed.open_reader(keyed_plan, keyed_shard, ReadFrom(rows=3, key=whole[2])) as reader:
            assert reader.snapshot is None
            assert [r.key for r in reader.rows] == whole[3:]
