"""A SQL image column: bytea/BLOB bytes and references (paths, file://, s3://) read as BinaryValues."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import sql_tables
import sqlalchemy as sa
from sql_tables import writer

from shardwise.errors import ConfigError, SourceError
from shardwise.lineage import value_fingerprint
from shardwise.model.binary_value import BinaryValue
from shardwise.sources.base import NewOnly
from shardwise.sources.images import ImageAccess
from shardwise.sources.sql.source import SqlSource

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests

IMAGES: dict[int, bytes | None] = {
    1: b"\x89PNG\r\n\x1a\n" + bytes(range(40)),
    2: b"\xff\xd8\xff\xe0 a jpeg-ish header" + b"\x00" * 7,
    3: None,
    4: bytes(range(256)) * 3,
}


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _table(url: str, rows: dict[int, Any], column_type: str) -> None:
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text("DROP TABLE IF EXISTS docs"))
        conn.execute(sa.text(f"CREATE TABLE docs (id BIGINT PRIMARY KEY, img {column_type})"))
        conn.execute(
            sa.text("INSERT INTO docs (id, img) VALUES (:id, :img)"),
            [{"id": k, "img": v} for k, v in rows.items()],
        )


def _binary(url: str) -> str:
    return "BYTEA" if url.startswith("postgresql") else "BLOB"


def _values(src: SqlSource, new_only: NewOnly | None = None) -> dict[Any, Any]:
    plan = src.plan(new_only=new_only)
    return {row.key: row.value for shard in plan.shards for row in src.read(plan, shard)}


def test_binary_image_columns_become_image_values_with_their_md5(any_url: str) -> None:
    _table(any_url, IMAGES, _binary(any_url))
    with SqlSource(any_url, "docs", "id", image_column="img") as src:
        assert src.params["image_column"] == "img"
        assert src.fingerprints_in_database
        values = _values(src)
    assert values == {k: BinaryValue(v) if v is not None else BinaryValue(None, error="NULL image")
                      for k, v in IMAGES.items()}  # fmt: skip
    assert value_fingerprint(values[1]) == _md5(IMAGES[1])  # type: ignore[arg-type]
    assert value_fingerprint(values[3]) is None


def test_only_new_anti_joins_a_binary_image_column_in_sql(any_url: str) -> None:
    _table(any_url, IMAGES, _binary(any_url))
    with SqlSource(any_url, "docs", "id", image_column="img") as src:
        values = _values(src)
    with writer(any_url) as eng, eng.begin() as conn:
        conn.execute(
            sa.text("CREATE TABLE results (source_key BIGINT, model_version TEXT, input_fingerprint TEXT)")
        )
        conn.execute(
            sa.text("INSERT INTO results VALUES (:k, 'm1', :f)"),
            [{"k": k, "f": value_fingerprint(v)} for k, v in values.items() if v.data is not None],
        )
        conn.execute(sa.text("UPDATE docs SET img = :b WHERE id = 4"), {"b": b"an edited image"})
    with SqlSource(any_url, "docs", "id", image_column="img") as src:
        assert sorted(_values(src, NewOnly("m1", "results"))) == [3, 4]  # the NULL, and the edited one


def test_a_missing_image_column_is_refused_naming_the_columns(sqlite_url: str) -> None:
    _table(sqlite_url, IMAGES, "BLOB")
    with pytest.raises(SourceError, match=r"^image column 'pic' not in table 'docs'; columns are: id, img$"):
        SqlSource(sqlite_url, "docs", "id", image_column="pic")


def test_an_image_column_takes_no_text_column(sqlite_url: str) -> None:
    _table(sqlite_url, IMAGES, "BLOB")
    with pytest.raises(ConfigError, match="replaces the text column"):
        SqlSource(sqlite_url, "docs", "id", "body", image_column="img")


def _files(tmp_path: Path) -> dict[int, Any]:
    """References of every kind, their bytes written here: a path, a file:// URI, a missing file."""
    for key, data in ((1, IMAGES[1]), (2, IMAGES[2]), (4, IMAGES[4])):
        (tmp_path / f"{key}.bin").write_bytes(data)  # type: ignore[arg-type]
    return {
        1: str(tmp_path / "1.bin"),
        2: (tmp_path / "2.bin").as_uri(),
        3: str(tmp_path / "gone.bin"),
        4: str(tmp_path / "4.bin"),
        5: None,
    }


def _under(root: Path) -> ImageAccess:
    """Local references allowed under ``root``, as ``--image-root ROOT`` allows them."""
    return ImageAccess(roots=(str(root),))


def test_local_references_are_fetched_in_key_order(any_url: str, tmp_path: Path) -> None:
    refs = _files(tmp_path)
    _table(any_url, refs, "TEXT")
    with SqlSource(any_url, "docs", "id", image_column="img", image_access=_under(tmp_path)) as src:
        assert not src.fingerprints_in_database
        plan = src.plan(shards=2)
        rows = [(row.key, row.value) for shard in plan.shards for row in src.read(plan, shard)]
    assert [k for k, _ in rows] == [1, 2, 3, 4, 5]
    values = dict(rows)
    assert values[1] == BinaryValue(IMAGES[1], origin=refs[1])
    assert values[2] == BinaryValue(IMAGES[2], origin=refs[2])
    assert values[3] == BinaryValue(None, origin=refs[3], error=f"no such file {refs[3]}")
    assert values[5] == BinaryValue(None, error="NULL image")
    assert value_fingerprint(values[4]) == _md5(IMAGES[4])  # type: ignore[arg-type]  # the fetched bytes
    assert value_fingerprint(values[3]) is None


def test_keyed_reads_of_references_fetch_too(sqlite_url: str, tmp_path: Path) -> None:
    _table(sqlite_url, _files(tmp_path), "TEXT")
    with SqlSource(sqlite_url, "docs", "id", image_column="img", image_access=_under(tmp_path)) as src:
        rows = list(src.read_keys([4, 2]))
    assert [(r.key, r.value.data) for r in rows] == [(2, IMAGES[2]), (4, IMAGES[4])]


def test_a_sql_only_new_plan_of_references_is_refused(sqlite_url: str, tmp_path: Path) -> None:
    """SQL sees only the reference text, not the bytes the fingerprint hashes: the pipeline compares."""
    _table(sqlite_url, _files(tmp_path), "TEXT")
    with (
        SqlSource(sqlite_url, "docs", "id", image_column="img") as src,
        pytest.raises(ConfigError, match="compares in Python"),
    ):
        src.plan(new_only=NewOnly("m1", "results"))


@pytest.mark.s3
@pytest.mark.postgres
def test_s3_references_are_fetched_through_the_s3_client(pg_url: str, client: Any, bucket: str) -> None:
    client.put_object(Bucket=bucket, Key="img/1.png", Body=IMAGES[1])
    client.put_object(Bucket=bucket, Key="img/2.jpg", Body=IMAGES[2])
    refs = {1: f"s3://{bucket}/img/1.png", 2: f"s3://{bucket}/img/2.jpg", 3: f"s3://{bucket}/img/nope.png"}
    _table(pg_url, refs, "TEXT")
    allowed = ImageAccess(buckets=(bucket,))  # a SQL source has no bucket of its own: --image-bucket
    with SqlSource(pg_url, "docs", "id", image_column="img", image_access=allowed, s3_client=client) as src:
        values = _values(src)
    assert list(values) == [1, 2, 3]
    assert values[1] == BinaryValue(IMAGES[1], origin=refs[1])
    assert value_fingerprint(values[2]) == _md5(IMAGES[2])  # type: ignore[arg-type]
    assert values[3].data is None and values[3].origin == refs[3]
    assert values[3].error.startswith(f"no such object {refs[3]}")
