"""ParquetSource on S3 against moto's S3 HTTP server on loopback: listing, plans from footers and key
columns, ETag checks."""

from __future__ import annotations

import io
import socket
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest
from botocore.config import Config
from flow_data import put_parquet

from shardwise.errors import SourceError, TransientError
from shardwise.sources import plan_objects
from shardwise.sources.base import NewOnly, SourcePlan
from shardwise.sources.parquet.source import ParquetSource


def read_all(source: ParquetSource, plan: SourcePlan) -> list[int | str]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        parts = pool.map(lambda shard: [r.key for r in source.read(plan, shard)], plan.shards)
        return [key for part in parts for key in part]


class CountingClient:
    """A real boto3 client (HTTP to moto) that records every GetObject call and the bytes it returned."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self.gets: list[tuple[dict[str, Any], int]] = []

    def get_object(self, **kwargs: Any) -> Any:
        response = self._client.get_object(**kwargs)
        with self._lock:
            self.gets.append((kwargs, int(response["ContentLength"])))
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.mark.s3
@pytest.mark.parametrize("sizing", [{"shards": 1}, {"shards": 4}, {"shards": 50}, {"rows_per_shard": 70}])
def test_s3_plans_are_disjoint_and_covering(client: Any, bucket: str, sizing: dict[str, int]) -> None:
    put_parquet(client, bucket, "data/a.parquet", list(range(130)))
    put_parquet(client, bucket, "data/b.parquet", [])
    put_parquet(client, bucket, "data/sub/c.parquet", list(range(1000, 1260)))
    put_parquet(client, bucket, "data2/not-mine.parquet", [99_999])
    client.put_object(Bucket=bucket, Key="data/_SUCCESS", Body=b"")
    client.put_object(Bucket=bucket, Key="data/notes.txt", Body=b"hello")
    source = ParquetSource(f"s3://{bucket}/data", s3_client=client)
    plan = source.plan(**sizing)
    assert Counter(read_all(source, plan)) == Counter([*range(130), *range(1000, 1260)])
    assert plan.expected_rows == 390 and source.identity == f"s3://{bucket}/data"
    assert (plan.params["objects"], plan.params["ignored_objects"]) == (3, 2)
    if "shards" in sizing:
        assert len(plan.shards) == min(sizing["shards"], plan.params["row_groups"])
    assert all(s["path"].startswith(f"s3://{bucket}/data/") for sh in plan.shards for s in sh.bounds["spans"])


def _key_chunks(client: Any, bucket: str, name: str) -> set[tuple[str, int, int]]:
    """(object, first byte, last byte) of each row group's key column chunk."""
    body = client.get_object(Bucket=bucket, Key=name)["Body"].read()
    metadata = pq.ParquetFile(io.BytesIO(body)).metadata
    chunks = set()
    for index in range(metadata.num_row_groups):
        column = metadata.row_group(index).column(0)
        first = column.dictionary_page_offset or column.data_page_offset
        chunks.add((name, first, first + column.total_compressed_size - 1))
    return chunks


@pytest.mark.s3
def test_planning_reads_footers_and_key_columns_only_with_ranged_gets(client: Any, bucket: str) -> None:
    """Footers to plan; the key column, never the text, to check that keys are unique (unique.py)."""
    for f in range(4):
        put_parquet(
            client,
            bucket,
            f"big/part-{f}.parquet",
            list(range(f * 20_000, (f + 1) * 20_000)),
            row_group_size=2000,
        )
    sizes = {o["Key"]: o["Size"] for o in client.list_objects_v2(Bucket=bucket, Prefix="big/")["Contents"]}
    key_chunks = set().union(*(_key_chunks(client, bucket, name) for name in sizes))
    counting = CountingClient(client)
    plan = ParquetSource(f"s3://{bucket}/big/", s3_client=counting).plan(shards=8)
    assert plan.expected_rows == 80_000 and len(plan.shards) == 8
    assert all("Range" in kwargs and kwargs["IfMatch"].strip('"') for kwargs, _ in counting.gets)
    read = Counter()
    for kwargs, _ in counting.gets:
        first, last = (int(b) for b in kwargs["Range"].removeprefix("bytes=").split("-"))
        chunk = (kwargs["Key"], first, last)
        read["footer" if last == sizes[kwargs["Key"]] - 1 else "key" if chunk in key_chunks else "other"] += 1
    # The tail (64 KiB, a larger footer: the rest too), each key column chunk once, and nothing else.
    assert read == {"footer": len(sizes), "key": len(key_chunks)}, read
    fetched = sum(n for _, n in counting.gets)
    assert fetched <= len(sizes) * 65536 + sum(last - first + 1 for _, first, last in key_chunks)

    # Half of part-0's row groups: the reader fetches their two column chunks, not the object.
    counting.gets.clear()
    first = plan.shards[0]
    assert first.bounds["spans"][0]["row_groups"] == [0, 5]
    source = ParquetSource(f"s3://{bucket}/big/", s3_client=counting)
    assert len(list(source.read(plan, first))) == 10_000
    assert all(kwargs["Range"].startswith("bytes=") for kwargs, _ in counting.gets)
    assert sum(n for _, n in counting.gets) < 0.7 * sizes["big/part-0.parquet"]


@pytest.mark.s3
def test_the_default_client_uses_the_standard_aws_settings(s3_env: Any, client: Any, bucket: str) -> None:
    put_parquet(client, bucket, "events/2026/a.parquet", list(range(40)))
    source = ParquetSource(f"s3://{bucket}/events/")
    plan = source.plan(rows_per_shard=25)
    assert sorted(read_all(source, plan)) == list(range(40))
    assert source.identity == f"s3://{bucket}/events" and "testing" not in plan.to_json()
    source.close()


@pytest.mark.s3
def test_an_object_location_reads_that_object_alone(client: Any, bucket: str) -> None:
    put_parquet(client, bucket, "d/one.parquet", [1, 2, 3])
    put_parquet(client, bucket, "d/one.parquet.bak/x.parquet", [4])
    source = ParquetSource(f"s3://{bucket}/d/one.parquet", s3_client=client)
    assert sorted(read_all(source, source.plan())) == [1, 2, 3]


@pytest.mark.s3
def test_nothing_to_read_is_a_source_error(client: Any, bucket: str) -> None:
    client.put_object(Bucket=bucket, Key="logs/run.log", Body=b"x")
    with pytest.raises(SourceError, match=r"no Parquet objects at 's3://.*/logs'.*1 other objects ignored"):
        ParquetSource(f"s3://{bucket}/logs/", s3_client=client).plan()
    with pytest.raises(SourceError, match="wrong folder, glob or prefix"):
        ParquetSource(f"s3://{bucket}/nothing-here/", s3_client=client).plan()


@pytest.mark.s3
def test_a_missing_bucket_is_a_source_error(client: Any) -> None:
    with pytest.raises(SourceError, match=r"NoSuchBucket.*check the bucket name"):
        ParquetSource(f"s3://no-such-{uuid.uuid4().hex[:8]}/x/", s3_client=client).plan()


@pytest.mark.s3
def test_a_missing_column_lists_the_columns(client: Any, bucket: str) -> None:
    put_parquet(client, bucket, "d/a.parquet", [1])
    with pytest.raises(
        SourceError, match=r"column 'body' not in Parquet object 's3://.*columns are: id, text"
    ):
        ParquetSource(f"s3://{bucket}/d/", text_column="body", s3_client=client).plan()


@pytest.mark.s3
def test_an_object_replaced_or_deleted_after_planning_fails_the_read(client: Any, bucket: str) -> None:
    put_parquet(client, bucket, "d/a.parquet", list(range(100)))
    put_parquet(client, bucket, "d/b.parquet", list(range(100, 200)))
    source = ParquetSource(f"s3://{bucket}/d/", s3_client=client)
    plan = source.plan(shards=2)
    put_parquet(client, bucket, "d/a.parquet", list(range(300)))
    client.delete_object(Bucket=bucket, Key="d/b.parquet")
    with pytest.raises(
        SourceError, match=r"'s3://.*/d/a.parquet' changed since it was listed.*PreconditionFailed"
    ):
        list(source.read(plan, plan.shards[0]))
    with pytest.raises(SourceError, match=r"d/b.parquet' changed since it was listed.*NoSuchKey"):
        list(source.read(plan, plan.shards[1]))


@pytest.mark.s3
def test_only_new_skips_seen_etags_and_picks_up_a_reupload(client: Any, bucket: str) -> None:
    for f in range(3):
        put_parquet(client, bucket, f"d/{f}.parquet", list(range(f * 100, f * 100 + 60)))
    source = ParquetSource(f"s3://{bucket}/d/", s3_client=client)
    seen = frozenset(plan_objects(source.plan()))
    assert all(key.startswith(f"s3://{bucket}/d/") and etag for key, etag in seen)
    new_only = NewOnly("tiny@1", "scores", seen)
    assert source.plan(new_only=new_only).shards == ()
    put_parquet(client, bucket, "d/1.parquet", list(range(500, 520)))
    again = source.plan(new_only=new_only)
    assert sorted(read_all(source, again)) == list(range(500, 520))
    assert (again.params["skipped_objects"], again.params["skipped_rows"]) == (2, 120)


def test_an_unreachable_endpoint_is_transient() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = boto3.client(
        "s3",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=1),
    )
    with pytest.raises(TransientError, match="S3 connection failed while listing s3://b/p"):
        ParquetSource("s3://b/p/", s3_client=client).plan()
