"""An image column reads only what the operator declared (issue 34, item 1).

Whoever can write a row chooses its references: ``/etc/shadow``,
``/proc/self/environ``, a ``..`` path, a symlink out of the declared root, a
FIFO (which blocked a fetch thread for ever), an object in someone else's
bucket. Each is refused with its reason and the fix, and nothing of it is
read: no bytes, so no fingerprint. The references live in a SQL table
(SQLite and PostgreSQL) and in a Parquet file.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from hostile_refs import (
    FOREIGN_BUCKET,
    PICTURE,
    Hostile,
    fifo_unblocked,
    hostile_refs,
    no_reader_left,
    read_all,
)
from sql_tables import writer

from shardwise.lineage import value_fingerprint
from shardwise.model.binary_value import BinaryValue
from shardwise.sources import ParquetSource
from shardwise.sources.base import Source
from shardwise.sources.images import ImageAccess, ImageColumn
from shardwise.sources.sql.source import SqlSource


def assert_refused_unread(values: dict[Any, BinaryValue], hostile: Hostile) -> None:
    """Every hostile row holds only its reason, which says what to do; the good rows hold the picture."""
    for key, ref in hostile.good.items():
        assert values[key] == BinaryValue(PICTURE, origin=ref)
    for key, ref in hostile.refused.items():
        value = values[key]
        assert (value.data, value.origin) == (None, ref), value
        assert value_fingerprint(value) is None  # nothing hashed: a dead letter stores no fingerprint
        error = str(value.error)
        assert error.startswith("refused: ") and "\n" not in error, error
        if key == 6:
            assert "not a regular file (a FIFO)" in error, error
        elif key in hostile.local_refused:
            assert f"outside the image roots ({hostile.root.resolve()})" in error, error
            assert "declare its folder with --image-root DIR (or SHARDWISE_IMAGE_ROOTS)" in error, error
        else:
            assert f"bucket {FOREIGN_BUCKET!r} is not an allowed image bucket (none is)" in error, error
            assert f"allow it with --image-bucket {FOREIGN_BUCKET}" in error, error
        assert "secret.png" not in error, error  # not the reference, nor where a symlink leads
    assert no_reader_left(hostile.fifo)  # the FIFO was never left open, nor waited on


def _sql(url: str, refs: dict[int, str], access: ImageAccess | None, s3_client: Any = None) -> SqlSource:
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS photos"))
        conn.execute(sa.text("CREATE TABLE photos (id BIGINT PRIMARY KEY, img TEXT)"))
        conn.execute(
            sa.text("INSERT INTO photos VALUES (:k, :r)"), [{"k": k, "r": r} for k, r in refs.items()]
        )
    return SqlSource(url, "photos", "id", image_column="img", image_access=access, s3_client=s3_client)


def _parquet(folder: Path, refs: dict[int, str], access: ImageAccess | None) -> ParquetSource:
    table = pa.table({"id": pa.array(list(refs), pa.int64()), "img": pa.array(list(refs.values()))})
    folder.mkdir()
    pq.write_table(table, folder / "part-0.parquet", row_group_size=3)
    return ParquetSource(str(folder), image_column="img", image_access=access)


Open = Callable[[Path, dict[int, str], ImageAccess | None], Source]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres), "parquet"])
def open_refs(request: pytest.FixtureRequest) -> Open:
    """Opens a source whose image column holds the given references: a SQL table, or a Parquet file."""
    if request.param == "parquet":
        return lambda tmp, refs, access: _parquet(tmp / "data", refs, access)
    url = str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))
    return lambda _, refs, access: _sql(url, refs, access)


def test_hostile_references_are_refused_and_nothing_of_them_is_read(open_refs: Open, tmp_path: Path) -> None:
    hostile = hostile_refs(tmp_path, PICTURE)
    refs, declared = {**hostile.good, **hostile.refused}, ImageAccess(roots=(str(hostile.root),))
    with fifo_unblocked(hostile.fifo), open_refs(tmp_path, refs, declared) as source:
        values = read_all(source)
    assert sorted(values) == sorted({**hostile.good, **hostile.refused})
    assert_refused_unread(values, hostile)


def test_without_a_declared_root_no_local_reference_is_read(open_refs: Open, tmp_path: Path) -> None:
    hostile = hostile_refs(tmp_path, PICTURE)
    with (
        fifo_unblocked(hostile.fifo),
        open_refs(tmp_path, hostile.good | {6: str(hostile.fifo)}, None) as src,
    ):
        values = read_all(src)
    for key, value in values.items():
        assert value.data is None, key
        assert str(value.error).startswith(
            "refused: no image root is declared, so no local path is read; declare the folder that holds the "
            "pictures with --image-root DIR (or SHARDWISE_IMAGE_ROOTS)"
        ), value
    assert no_reader_left(hostile.fifo)


def test_a_root_reached_through_a_symlink_and_a_symlink_inside_it_are_read(
    sqlite_url: str, tmp_path: Path
) -> None:
    """Resolving symlinks refuses the ways out, not the ways in: a root given as a symlink, and a symlink
    that stays under the root, read as before."""
    hostile = hostile_refs(tmp_path, PICTURE)
    (tmp_path / "alias").symlink_to(hostile.root)
    (hostile.root / "sub" / "again.png").symlink_to(hostile.root / "good.png")
    refs = {1: str(tmp_path / "alias" / "good.png"), 2: str(hostile.root / "sub" / "again.png")}
    with _sql(sqlite_url, refs, ImageAccess(roots=(str(tmp_path / "alias"),))) as source:
        values = read_all(source)
    assert {k: v.data for k, v in values.items()} == {1: PICTURE, 2: PICTURE}


def test_a_second_root_allows_what_the_first_does_not(sqlite_url: str, tmp_path: Path) -> None:
    hostile = hostile_refs(tmp_path, PICTURE)
    access = ImageAccess(roots=(str(hostile.root), str(hostile.outside.parent)))
    with _sql(sqlite_url, {5: str(hostile.root / "link.png"), 4: hostile.refused[4]}, access) as source:
        values = read_all(source)
    assert {k: v.data for k, v in values.items()} == {4: PICTURE, 5: PICTURE}


def test_a_root_containing_proc_still_never_reads_the_kernels_files(sqlite_url: str) -> None:
    with _sql(sqlite_url, {1: "/proc/self/environ", 2: "/dev/zero"}, ImageAccess(roots=("/",))) as source:
        values = read_all(source)
    for value in values.values():
        assert value.data is None
        assert str(value.error).startswith("refused: the path is in a system folder (/proc, /sys, /dev)")


@pytest.mark.s3
def test_s3_references_only_in_the_sources_bucket_or_an_allowed_one(client: Any, bucket: str) -> None:
    """A Parquet source on S3 reads its own bucket's objects; another bucket's only once allowed."""
    other = f"sw-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=other)
    client.put_object(Bucket=bucket, Key="img/mine.png", Body=PICTURE)
    client.put_object(Bucket=other, Key="img/theirs.png", Body=PICTURE)
    refs = {1: f"s3://{bucket}/img/mine.png", 2: f"s3://{other}/img/theirs.png"}
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": pa.array(list(refs), pa.int64()), "img": list(refs.values())}), buffer)
    client.put_object(Bucket=bucket, Key="data/part-0.parquet", Body=buffer.getvalue())
    location = f"s3://{bucket}/data/"
    with ParquetSource(location, image_column="img", s3_client=client) as source:
        values = read_all(source)
    assert values[1] == BinaryValue(PICTURE, origin=refs[1])
    assert values[2].data is None and value_fingerprint(values[2]) is None
    assert str(values[2].error).startswith(
        f"refused: bucket {other!r} is neither the source's own bucket {bucket!r} nor an allowed image "
        f"bucket (none is), so nothing was fetched; allow it with --image-bucket {other}"
    )
    allowed = ImageAccess(buckets=(other,))
    with ParquetSource(location, image_column="img", s3_client=client, image_access=allowed) as source:
        assert read_all(source)[2] == BinaryValue(PICTURE, origin=refs[2])


@pytest.mark.s3
def test_a_sql_source_has_no_bucket_of_its_own(sqlite_url: str, client: Any, bucket: str) -> None:
    client.put_object(Bucket=bucket, Key="img/a.png", Body=PICTURE)
    refs = {1: f"s3://{bucket}/img/a.png"}
    with _sql(sqlite_url, refs, None, client) as source:
        (value,) = read_all(source).values()
    assert value.data is None and "a source not on S3 has no bucket of its own" in str(value.error)
    with _sql(sqlite_url, refs, ImageAccess(buckets=(bucket,)), client) as source:
        assert read_all(source) == {1: BinaryValue(PICTURE, origin=refs[1])}


@pytest.mark.parametrize(
    ("ref", "reason"),
    [
        ("/a\x00b.png", "refused: the path holds a NUL byte; fix the reference"),
        (
            "file://fileserver/share/a.png",
            "file:// URI names host 'fileserver'; only this host's files are read",
        ),
        ("ftp://host/a.png", "image reference scheme 'ftp' is not supported"),
        ("s3:///a.png", "no such object s3:///a.png (the reference names no bucket)"),
    ],
)
def test_an_odd_reference_is_its_rows_reason_not_a_failed_shard(
    ref: str, reason: str, tmp_path: Path
) -> None:
    """Once a NUL byte in a path raised ValueError from the fetch thread, failing the whole shard."""
    value = ImageColumn("img", access=ImageAccess(roots=(str(tmp_path),))).value(ref)
    assert value.data is None and value.origin == ref and str(value.error).startswith(reason), value
