"""A Parquet image column: binary values and references (paths, file://, s3://), local and on moto S3."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import SourceError
from shardwise.lineage import value_fingerprint
from shardwise.model.binary_value import BinaryValue
from shardwise.sources import ParquetSource
from shardwise.sources.images import ImageAccess

PICTURES = [b"\x89PNG" + bytes(range(30)), None, b"GIF89a" + b"\x01" * 20, bytes(range(200))]


def _table(values: list[Any], kind: pa.DataType) -> pa.Table:
    return pa.table({"id": pa.array(range(1, len(values) + 1), pa.int64()), "img": pa.array(values, kind)})


def _write(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=2)  # several row groups: rows cross them in order
    return out.getvalue()


def _rows(source: ParquetSource) -> list[tuple[Any, Any]]:
    plan = source.plan(shards=2)
    out = []
    for shard in plan.shards:
        with source.open_reader(plan, shard) as reader:
            out += [(row.key, row.value) for row in reader.rows]
    return out


def _expected_inline() -> list[tuple[int, BinaryValue]]:
    return [
        (i, BinaryValue(v) if v is not None else BinaryValue(None, error="NULL image"))
        for i, v in enumerate(PICTURES, start=1)
    ]


def test_a_local_binary_column_becomes_image_values(tmp_path: Path) -> None:
    (tmp_path / "a.parquet").write_bytes(_write(_table(PICTURES, pa.binary())))
    with ParquetSource(str(tmp_path), image_column="img") as source:
        assert source.params["image_column"] == "img"
        rows = _rows(source)
    assert rows == _expected_inline()
    assert value_fingerprint(rows[0][1]) == hashlib.md5(PICTURES[0]).hexdigest()  # type: ignore[arg-type]


def test_local_references_keep_their_order_and_a_missing_file_is_an_error(tmp_path: Path) -> None:
    images = tmp_path / "images"
    images.mkdir()
    refs: list[str | None] = []
    for i, data in enumerate(PICTURES):
        if data is None:
            refs.append(None)
            continue
        (images / f"{i}.bin").write_bytes(data)
        refs.append((images / f"{i}.bin").as_uri() if i % 2 else str(images / f"{i}.bin"))
    refs.append(str(images / "missing.png"))
    (tmp_path / "a.parquet").write_bytes(_write(_table(refs, pa.string())))
    declared = ImageAccess(roots=(str(images),))
    with ParquetSource(str(tmp_path / "a.parquet"), image_column="img", image_access=declared) as source:
        rows = _rows(source)
    assert [k for k, _ in rows] == [1, 2, 3, 4, 5]
    assert [v.data for _, v in rows[:4]] == PICTURES
    assert rows[2][1].origin == refs[2]
    assert rows[4][1] == BinaryValue(None, origin=refs[4], error=f"no such file {refs[4]}")


def test_a_missing_image_column_is_refused_when_planning(tmp_path: Path) -> None:
    (tmp_path / "a.parquet").write_bytes(_write(_table(PICTURES, pa.binary())))
    with (
        ParquetSource(str(tmp_path), image_column="pic") as source,
        pytest.raises(
            SourceError, match=r"image column 'pic' not in Parquet object .*; columns are: id, img"
        ),
    ):
        source.plan()


@pytest.mark.s3
def test_a_binary_column_on_s3(client: Any, bucket: str) -> None:
    client.put_object(Bucket=bucket, Key="data/a.parquet", Body=_write(_table(PICTURES, pa.binary())))
    with ParquetSource(f"s3://{bucket}/data", image_column="img", s3_client=client) as source:
        assert _rows(source) == _expected_inline()


@pytest.mark.s3
def test_s3_references_on_s3(client: Any, bucket: str) -> None:
    """The Parquet object and the images it names are both on S3, read through one client."""
    client.put_object(Bucket=bucket, Key="img/a.png", Body=PICTURES[0])
    client.put_object(Bucket=bucket, Key="img/b.gif", Body=PICTURES[2])
    refs = [f"s3://{bucket}/img/a.png", f"s3://{bucket}/img/gone.png", f"s3://{bucket}/img/b.gif"]
    client.put_object(Bucket=bucket, Key="data/a.parquet", Body=_write(_table(refs, pa.string())))
    with ParquetSource(f"s3://{bucket}/data", image_column="img", s3_client=client) as source:
        rows = _rows(source)
    assert [(k, v.data) for k, v in rows] == [(1, PICTURES[0]), (2, None), (3, PICTURES[2])]
    assert rows[1][1].origin == refs[1]
    assert rows[1][1].error.startswith(f"no such object {refs[1]}")
    assert value_fingerprint(rows[2][1]) == hashlib.md5(PICTURES[2]).hexdigest()  # type: ignore[arg-type]


@pytest.mark.s3
def test_s3_references_through_the_standard_aws_settings(s3_env: Any, client: Any, bucket: str) -> None:
    """No client passed: the source's own S3 client (AWS_ENDPOINT_URL ...) reads the data and its images."""
    client.put_object(Bucket=bucket, Key="img/a.png", Body=PICTURES[0])
    refs = [f"s3://{bucket}/img/a.png", f"s3://{bucket}/img/gone.png"]
    client.put_object(Bucket=bucket, Key="data/a.parquet", Body=_write(_table(refs, pa.string())))
    with ParquetSource(f"s3://{bucket}/data", image_column="img") as source:
        rows = _rows(source)
    assert [(k, v.data) for k, v in rows] == [(1, PICTURES[0]), (2, None)]
    assert rows[1][1].error.startswith(f"no such object {refs[1]}")
