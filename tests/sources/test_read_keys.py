"""Keyed reads: SQL ``key IN (...)`` in chunks and a Parquet key-column scan, and the KeyedSource on top."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sql_tables
from sql_tables import create_docs, with_docs, writer

from shardwise.errors import ConfigError
from shardwise.sources import KeyedSource, ParquetSource, Source, is_keyed
from shardwise.sources.keys import KEY_CHUNK
from shardwise.sources.sql.source import SqlSource

ROWS = [(k, f"row {k}") for k in range(1, 2001)] + [(3000, None)]

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


@pytest.fixture
def docs_url(any_url: str) -> str:
    return with_docs(any_url, ROWS)


def test_sql_reads_text_keys_in_key_order_across_chunks(docs_url: str) -> None:
    wanted = [str(k) for k in range(2000, 0, -2)] + ["3000", "99999", "4"]  # "4" twice, 99999 absent
    assert len(wanted) > KEY_CHUNK
    with SqlSource(docs_url, "docs", "id", "text") as src:
        rows = [(r.key, r.value) for r in src.read_keys(wanted)]
    assert rows == [(k, f"row {k}") for k in range(2, 2001, 2)] + [(3000, None)]


def test_sql_keyed_read_keeps_the_where_filter(docs_url: str) -> None:
    with SqlSource(docs_url, "docs", "id", "text", where="id <= 10") as src:
        assert [r.key for r in src.read_keys(["5", "10", "11", "1500"])] == [5, 10]


def test_sql_key_that_is_not_an_integer_is_refused(docs_url: str) -> None:
    with (
        SqlSource(docs_url, "docs", "id", "text") as src,
        pytest.raises(ConfigError, match=r"key 'abc' is not an integer.*holds integers"),
    ):
        list(src.read_keys(["1", "abc"]))


def test_sql_text_keys_stay_text(any_url: str) -> None:
    with writer(any_url) as eng:
        create_docs(eng, [("a", "x"), ("b", "y"), ("10", "z")], key_type="TEXT")
    with SqlSource(any_url, "docs", "id", "text") as src:
        assert [(r.key, r.value) for r in src.read_keys(["10", "b", "missing"])] == [("10", "z"), ("b", "y")]


def test_sql_no_keys_reads_nothing(docs_url: str) -> None:
    with SqlSource(docs_url, "docs", "id", "text") as src:
        assert list(src.read_keys([])) == []


def _write(path: Path, keys: list[int | None], texts: list[str | None], group: int = 10) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array(keys, pa.int64()), "text": texts}), path, row_group_size=group)


def test_parquet_scan_yields_only_wanted_keys_in_storage_order(tmp_path: Path) -> None:
    _write(tmp_path / "b.parquet", [50, 40, None, 30], ["fifty", "forty", "no key", None])
    _write(tmp_path / "a.parquet", list(range(25)), [f"t{k}" for k in range(25)], group=4)
    (tmp_path / "_SUCCESS").write_text("")
    src = ParquetSource(str(tmp_path))
    rows = [(r.key, r.value) for r in src.read_keys(["30", "7", "50", "21", "7", "404"])]
    assert rows == [(7, "t7"), (21, "t21"), (50, "fifty"), (30, None)]


def test_parquet_text_keys(tmp_path: Path) -> None:
    table = pa.table({"doc": ["x", "y", "z"], "body": ["1", "2", "3"]}).cast(
        pa.schema([("doc", pa.large_string()), ("body", pa.string())])
    )
    pq.write_table(table, tmp_path / "t.parquet")
    src = ParquetSource(str(tmp_path), key="doc", text_column="body")
    assert [(r.key, r.value) for r in src.read_keys(["z", "x", "w"])] == [("x", "1"), ("z", "3")]


def test_parquet_key_that_is_not_an_integer_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "a.parquet", [1, 2], ["a", "b"])
    with pytest.raises(ConfigError, match=r"key 'x' is not an integer"):
        list(ParquetSource(str(tmp_path)).read_keys(["1", "x"]))


@pytest.mark.parametrize(
    ("shards", "rows_per_shard", "sizes"), [(3, None, [2, 3, 3]), (None, 3, [3, 3, 2]), (20, None, [1] * 8)]
)
def test_keyed_source_plans_sorted_unique_keys(
    docs_url: str, shards: int | None, rows_per_shard: int | None, sizes: list[int]
) -> None:
    keys = [9, 1, 5, 3, 7, 1, 11, 13, 99999]
    with KeyedSource(
        SqlSource(docs_url, "docs", "id", "text"), keys, extra_params={"redrive_of": "r1"}
    ) as src:
        source: Source = src
        plan = source.plan(shards=shards, rows_per_shard=rows_per_shard)
        assert is_keyed(plan) and plan.snapshot is None and plan.kind == "sql"
        assert [s.expected_rows for s in plan.shards] == sizes
        assert plan.params["redrive"] is True and plan.params["keys"] == 8
        assert plan.params["redrive_of"] == "r1" and plan.params["key_type"] == "int"
        assert [s.bounds["keys"] for s in type(plan).from_json(plan.to_json()).shards] == [
            s.bounds["keys"] for s in plan.shards
        ]
        read = [r.key for shard in plan.shards for r in source.read(plan, shard)]
    assert read == [1, 3, 5, 7, 9, 11, 13]  # 99999 is gone from the source: not yielded


def test_keyed_source_with_no_keys_plans_no_shards(tmp_path: Path) -> None:
    _write(tmp_path / "a.parquet", [1, 2], ["a", "b"])
    plan = KeyedSource(ParquetSource(str(tmp_path)), []).plan()
    assert plan.shards == () and plan.params["key_type"] is None and plan.kind == "parquet"


def test_keyed_source_refuses_other_plans_and_mixed_keys(docs_url: str) -> None:
    with SqlSource(docs_url, "docs", "id", "text") as inner:
        with pytest.raises(ConfigError, match="all integers or all text"):
            KeyedSource(inner, [1, "2"])
        keyed = KeyedSource(inner, [1, 2])
        range_plan = inner.plan(shards=1)
        with pytest.raises(ConfigError, match="range sql plan"):
            list(keyed.read(range_plan, range_plan.shards[0]))
        with pytest.raises(ConfigError, match="new_only does not apply"):
            keyed.plan(new_only=object())  # type: ignore[arg-type]


@pytest.mark.s3
def test_parquet_keyed_read_on_s3(s3_env: Any) -> None:
    client = s3_env.client()
    bucket = f"keys-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    for part, ids in enumerate([list(range(0, 30)), list(range(30, 60))]):
        buffer = io.BytesIO()
        pq.write_table(pa.table({"id": ids, "text": [f"s3 row {i}" for i in ids]}), buffer, row_group_size=8)
        client.put_object(Bucket=bucket, Key=f"ds/part-{part}.parquet", Body=buffer.getvalue())
    with KeyedSource(ParquetSource(f"s3://{bucket}/ds/"), [44, 3, 59]) as src:
        plan = src.plan(shards=2)
        rows = [(r.key, r.value) for shard in plan.shards for r in src.read(plan, shard)]
    assert sorted(rows) == [(3, "s3 row 3"), (44, "s3 row 44"), (59, "s3 row 59")]
