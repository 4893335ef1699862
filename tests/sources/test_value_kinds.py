"""What each source says its rows hold before planning (``Source.value_kind``): texts, pictures, or a
binary column read as text whose sampled values hold no text (``bytes``), on SQLite, PostgreSQL and
Parquet, an image folder, and a keyed source over each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import sql_tables
import sqlalchemy as sa
from image_builders import encoded, picture
from sql_tables import writer

from shardwise.sources import ImageFolderSource, KeyedSource, ParquetSource, SqlSource
from shardwise.sources.binary import SAMPLE_ROWS, binary_values, picture_format

any_url = sql_tables.any_url  # the SQLite/PostgreSQL fixture, shared by the SQL source tests


def _png(seed: int) -> bytes:
    return encoded(picture("RGB", (12, 9), seed), "PNG")


PICTURES = {
    "PNG": _png(0),
    "JPEG": encoded(picture("RGB", (12, 9)), "JPEG"),
    "GIF": encoded(picture("P", (12, 9)), "GIF"),
    "WebP": encoded(picture("RGB", (12, 9)), "WEBP"),
    "BMP": encoded(picture("RGB", (12, 9)), "BMP"),
    "TIFF": encoded(picture("RGB", (12, 9)), "TIFF"),
}
TEXT = "héllo, a paragraph stored as UTF-8 bytes ✓ ".encode() * 4  # longer than the sampled prefix
NOT_UTF8 = b"\xff\xfe\x00 binary data, not text"


def test_each_picture_format_is_told_by_its_signature() -> None:
    assert {name: picture_format(data) for name, data in PICTURES.items()} == {n: n for n in PICTURES}
    assert picture_format(TEXT) is None and picture_format(NOT_UTF8) is None


def test_a_sample_is_bytes_only_when_none_of_its_values_is_text() -> None:
    def kind(sample: list[Any]) -> str:
        return binary_values("text column 'c' of t", "c", "BLOB column", sample).kind

    assert kind([p[:64] for p in PICTURES.values()]) == "bytes"
    assert kind([NOT_UTF8, PICTURES["PNG"]]) == "bytes"
    assert kind([NOT_UTF8, TEXT[:64]]) == "text", "one text value: the rows that fail are dead letters"
    assert kind([TEXT[:64]]) == "text", "a character cut by the prefix is still text"
    assert kind([]) == "text", "nothing to sample (every value NULL): nothing to refuse"
    assert kind(["a text in a column of no declared type"]) == "text"
    given = binary_values(
        "text column 'c' of t", "c", "BLOB column", [PICTURES["PNG"], PICTURES["PNG"], NOT_UTF8]
    )
    assert (
        given.detail == "a BLOB column, and none of the 3 values sampled is UTF-8 text (2 PNG, 1 not UTF-8)"
    )


def _table(url: str, values: dict[int, Any], column_type: str | None = None) -> None:
    pg = url.startswith("postgresql")
    column_type = column_type or ("BYTEA" if pg else "BLOB")
    with writer(url) as eng, eng.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE media (id BIGINT PRIMARY KEY, title TEXT, body {column_type})"))
        rows = [{"id": k, "title": f"title {k}", "body": v} for k, v in values.items()]
        conn.execute(sa.text("INSERT INTO media (id, title, body) VALUES (:id, :title, :body)"), rows)


def _sql_kind(url: str, column: str = "body", **options: Any) -> Any:
    with SqlSource(url, "media", "id", column, **options) as source:
        return source.value_kind()


def test_a_binary_column_of_pictures_read_as_text_is_bytes(any_url: str) -> None:
    _table(any_url, {k: _png(k) for k in range(40)} | {90: None})
    given = _sql_kind(any_url)
    assert (given.kind, given.column) == ("bytes", "body")
    type_name = "BYTEA" if any_url.startswith("postgresql") else "BLOB"
    n = SAMPLE_ROWS
    assert given.detail == f"a {type_name} column, and none of the {n} values sampled is UTF-8 text ({n} PNG)"
    assert given.what.startswith("text column 'body' of ")
    with SqlSource(any_url, "media", "id", "body") as source:
        assert KeyedSource(source, [1, 2]).value_kind() == given


def test_a_binary_column_of_utf8_text_stays_text_and_other_columns_are_not_read(any_url: str) -> None:
    _table(any_url, {1: TEXT, 2: None, 3: NOT_UTF8})
    assert _sql_kind(any_url).kind == "text", "the documented choice: a bytea of UTF-8 text is scored"
    assert _sql_kind(any_url, "title").kind == "text"


def test_the_sample_is_of_the_rows_the_filter_keeps(any_url: str) -> None:
    _table(any_url, {1: TEXT, **{k: _png(k) for k in range(2, 30)}})
    assert _sql_kind(any_url).kind == "text"
    assert _sql_kind(any_url, where="id >= 2").kind == "bytes"
    assert _sql_kind(any_url, where="id < 2").kind == "text"


def test_an_image_column_holds_pictures(any_url: str) -> None:
    _table(any_url, {1: TEXT})
    given = _sql_kind(any_url, "text", image_column="body")
    assert (given.kind, given.column) == ("image", "body")
    assert given.what.startswith("image column 'body' of ")


def test_a_sqlite_column_of_no_declared_type_holding_pictures_is_bytes(sqlite_url: str) -> None:
    with writer(sqlite_url) as eng, eng.begin() as conn:
        conn.execute(sa.text("CREATE TABLE media (id INTEGER PRIMARY KEY, title TEXT, body)"))
        rows = [{"id": k, "body": _png(k)} for k in range(3)]
        conn.execute(sa.text("INSERT INTO media (id, body) VALUES (:id, :body)"), rows)
    given = _sql_kind(sqlite_url)
    assert given.kind == "bytes" and "a column of no declared type," in given.detail, given
    with writer(sqlite_url) as eng, eng.begin() as conn:
        conn.execute(sa.text("UPDATE media SET body = 'a text after all' WHERE id = 1"))
    assert _sql_kind(sqlite_url).kind == "text"


def _parquet(path: Path, body: pa.Array) -> str:
    table = pa.table({"id": pa.array(range(len(body)), pa.int64()), "body": body})
    pq.write_table(table, path / "part-0.parquet")
    return str(path)


def test_a_parquet_binary_column_of_pictures_is_bytes_and_of_text_is_text(tmp_path: Path) -> None:
    (tmp_path / "pictures").mkdir()
    (tmp_path / "texts").mkdir()
    (tmp_path / "strings").mkdir()
    pictures = _parquet(tmp_path / "pictures", pa.array([None, *(_png(k) for k in range(20))], pa.binary()))
    texts = _parquet(tmp_path / "texts", pa.array([TEXT, NOT_UTF8], pa.large_binary()))
    strings = _parquet(tmp_path / "strings", pa.array(["a", "b"], pa.string()))
    with ParquetSource(pictures, "id", "body") as source:
        given = source.value_kind()
        assert KeyedSource(source, [1]).value_kind() == given
    assert given.kind == "bytes" and given.detail.startswith("a Parquet binary column, and none of the "), (
        given
    )
    assert "(15 PNG)" in given.detail, "the first values, NULLs left out: 16 read, 1 NULL"
    for location in (texts, strings):
        with ParquetSource(location, "id", "body") as source:
            assert source.value_kind().kind == "text"
    with ParquetSource(pictures, "id", "text", image_column="body") as source:
        assert (source.value_kind().kind, source.value_kind().column) == ("image", "body")


def test_an_image_folder_holds_pictures(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(_png(1))
    with ImageFolderSource(str(tmp_path)) as source:
        given = source.value_kind()
    assert (given.kind, given.column, given.what) == ("image", None, f"image folder {str(tmp_path)!r}")
