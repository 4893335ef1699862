"""Parquet files as real producers damage them: text that is not UTF-8, and garbled pages.

A value that is not UTF-8 in a column declared as text fails only its row (a
dead letter naming the key, the object and the row group); the rest of its
row group is scored. A garbled page fails its shard with a SourceError naming
the object and the row group, never a bare pyarrow error.
"""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from flow_data import execute
from spec_builder import flat_spec

from shardwise.errors import InputError, SourceError
from shardwise.lineage import value_fingerprint
from shardwise.model.text import UndecodableText, coerce_text
from shardwise.sources.parquet.source import ParquetSource
from shardwise.sources.parquet.text import text_values

BAD = {3: b"caf\xe9 au lait", 7: b"\xff\xfe half a BOM", 12: b"cut in the middle \xe2\x82"}
"""Keys whose text is Latin-1 or cut mid-character: what a writer that never checks UTF-8 stores."""


def raw_text_array(values: list[bytes | None]) -> pa.Array:
    """A ``string`` array of these exact bytes: ``from_buffers`` checks no UTF-8, as most writers don't."""
    data = b"".join(v or b"" for v in values)
    offsets = np.cumsum([0, *(len(v or b"") for v in values)], dtype=np.int32)
    validity = np.packbits([v is not None for v in values], bitorder="little")
    buffers = [pa.py_buffer(validity.tobytes()), pa.py_buffer(offsets.tobytes()), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.string(), len(values), buffers)


def rows(n: int = 16) -> list[tuple[int, bytes | None]]:
    return [(k, BAD.get(k, f"paragraph {k} about shards and merges".encode())) for k in range(n)]


def write(
    path: Path, content: list[tuple[int, bytes | None]], *, store_schema: bool = True, **options: object
) -> Path:
    """``content`` as ``id`` and ``text`` (declared UTF-8 text), 8 rows per row group.

    ``store_schema=False`` leaves out pyarrow's own schema, as Spark and other
    non-Arrow writers do: the reader then goes by the Parquet STRING annotation.
    """
    table = pa.table(
        {"id": pa.array([k for k, _ in content], pa.int64()), "text": raw_text_array([v for _, v in content])}
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, row_group_size=8, store_schema=store_schema, **options)
    return path


def at(path: Path, row_group: int) -> str:
    """A pattern for where an error says it happened."""
    return re.escape(f"row group {row_group} of Parquet object {str(path)!r}")


def read(folder: Path) -> list[tuple[int, object]]:
    source = ParquetSource(str(folder))
    plan = source.plan(shards=1)
    return [(row.key, row.value) for shard in plan.shards for row in source.read(plan, shard)]


@pytest.mark.parametrize("store_schema", [True, False])
def test_the_file_reproduces_the_bare_unicode_error(tmp_path: Path, store_schema: bool) -> None:
    path = write(tmp_path / "part-0.parquet", rows(), store_schema=store_schema)
    assert pq.ParquetFile(path).schema.column(1).logical_type.type == "STRING"
    with pytest.raises(UnicodeDecodeError):
        pq.read_table(path).column("text").to_pylist()


@pytest.mark.parametrize("store_schema", [True, False])
def test_only_the_bad_values_fail_and_they_name_key_object_and_row_group(
    tmp_path: Path, store_schema: bool
) -> None:
    path = write(tmp_path / "part-0.parquet", rows(), store_schema=store_schema)
    read_rows = read(tmp_path)
    assert [k for k, _ in read_rows] == list(range(16))
    good = {k: v for k, v in read_rows if k not in BAD}
    assert good == {k: f"paragraph {k} about shards and merges" for k in good}
    for key, value in read_rows:
        if key not in BAD:
            continue
        assert isinstance(value, UndecodableText) and bytes(value) == BAD[key]
        assert value_fingerprint(value) == value_fingerprint(BAD[key]), "the stored bytes' fingerprint"
        with pytest.raises(InputError) as caught:
            coerce_text(value)
        message = str(caught.value)
        group = key // 8
        assert f"key {key} in row group {group} of Parquet object {str(path)!r}" in message
        assert "not valid UTF-8" in message and "rewrite it" in message


def test_an_undecodable_value_pickles_with_where_it_came_from() -> None:
    value = UndecodableText(b"\xff", "k1", "row group 2 of Parquet object 'x.parquet'")
    back = pickle.loads(pickle.dumps(value))
    assert (bytes(back), back.key, back.where) == (b"\xff", "k1", value.where)


@pytest.mark.parametrize(
    "to_type", [pa.string(), pa.large_string(), pa.string_view(), pa.dictionary(pa.int32(), pa.string())]
)
def test_every_arrow_text_type_falls_back_value_by_value(to_type: pa.DataType) -> None:
    column = raw_text_array([b"fine", b"\xff", None]).cast(to_type)
    values = text_values(pa.chunked_array([column]), ["a", "b", "c"], "row group 0 of Parquet object 'f'")
    assert values[0] == "fine" and values[2] is None
    assert isinstance(values[1], UndecodableText) and values[1].key == "b"


def test_a_bad_text_key_fails_the_shard_naming_object_and_row_group(tmp_path: Path) -> None:
    keys = raw_text_array([b"a", b"b\xff", b"c"])
    path = tmp_path / "part-0.parquet"
    pq.write_table(pa.table({"id": keys, "text": ["one", "two", "three"]}), path)
    with pytest.raises(SourceError, match="key column 'id' in " + at(path, 0)):
        read(tmp_path)


def garble(path: Path, row_group: int) -> None:
    """Overwrite 16 bytes in the middle of ``row_group``'s text column chunk; the footer stays intact."""
    chunk = pq.ParquetFile(path).metadata.row_group(row_group).column(1)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    middle = start + chunk.total_compressed_size // 2
    with path.open("r+b") as handle:
        handle.seek(middle)
        handle.write(b"\xa5" * 16)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"write_page_checksum": True}, id="checksummed page"),
        pytest.param({"compression": "snappy"}, id="snappy page"),
        pytest.param({"compression": "zstd"}, id="zstd page"),
    ],
)
def test_a_garbled_page_fails_with_a_source_error_naming_object_and_row_group(
    tmp_path: Path, options: dict[str, object]
) -> None:
    path = write(tmp_path / "part-0.parquet", rows(24), **options)
    garble(path, 1)
    source = ParquetSource(str(tmp_path))
    plan = source.plan(shards=3)  # the footer is intact: planning works
    assert len(list(source.read(plan, plan.shards[0]))) == 8, "row group 0 is intact"
    with pytest.raises(SourceError, match=at(path, 1)) as caught:
        list(source.read(plan, plan.shards[1]))
    assert "damaged" in str(caught.value)


def test_a_run_dead_letters_the_bad_values_and_scores_the_rest(
    tmp_path: Path, sqlite_url: str, pipeline
) -> None:
    data = tmp_path / "data"
    path = write(data / "part-0.parquet", rows(24))
    spec = flat_spec(source=str(data), results=sqlite_url, results_table="scores", model="tiny", shards=2)
    _, counts = pipeline.run(spec, "first")
    assert (counts.rows_in, counts.rows_out, counts.rows_failed) == (24, 21, 3)
    scored = execute(sqlite_url, "SELECT source_key FROM scores ORDER BY source_key")
    assert sorted(int(k) for (k,) in scored) == [k for k in range(24) if k not in BAD]
    letters = execute(sqlite_url, "SELECT source_key, error_class, message FROM shardwise_errors")
    assert sorted(int(k) for k, _, _ in letters) == sorted(BAD)
    for key, error_class, message in letters:
        assert error_class == "InputError"
        assert f"key {key} in row group {int(key) // 8} of Parquet object {str(path)!r}" in message

    redrive = flat_spec(
        model="tiny", source=str(data), results=sqlite_url, results_table="scores", redrive="first"
    )
    planned, _ = pipeline.run(redrive, "again")
    assert planned.plan.shards == (), "the keyed read fingerprints the stored bytes: nothing changed"


def test_a_run_over_a_garbled_page_fails_that_shard_only(tmp_path: Path, sqlite_url: str, pipeline) -> None:
    data = tmp_path / "data"
    path = write(data / "part-0.parquet", rows(24), write_page_checksum=True)
    garble(path, 2)
    spec = flat_spec(source=str(data), results=sqlite_url, results_table="scores", model="tiny", shards=3)
    with pytest.raises(SourceError, match=at(path, 2)):
        pipeline.run(spec, "garbled")
    shards = execute(sqlite_url, "SELECT shard_id, status FROM shardwise_shards ORDER BY shard_id")
    assert [s for _, s in shards][-1] == "failed"
    assert execute(sqlite_url, "SELECT count(*) FROM scores") == [(16 - sum(k < 16 for k in BAD),)]
