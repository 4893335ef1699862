"""A Parquet source refuses a repeated key, in check() and when planning, naming the keys and their files.

A key in two files once kept one row's result silently (issue 24): both rows
were scored and the run counted both, but the results hold one row per key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spec_builder import flat_spec

from shardwise.errors import ConfigError
from shardwise.sources import plan_objects
from shardwise.sources.base import NewOnly
from shardwise.sources.files.objects import ObjectInfo
from shardwise.sources.files.spans import RowGroup
from shardwise.sources.parquet.source import ParquetSource
from shardwise.sources.parquet.unique import _clusters


def write(path: Path, keys: list[Any], key_type: pa.DataType | None = None, **options: Any) -> Path:
    table = pa.table({"id": pa.array(keys, key_type or pa.int64()), "text": [f"row {k}" for k in keys]})
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path, **options)
    return path


def refusals(location: str, **kwargs: Any) -> list[str]:
    """The message of check() and of plan(), which must both refuse, each one line."""
    messages = []
    with ParquetSource(location, **kwargs) as source:
        for attempt in (source.check, source.plan):
            with pytest.raises(ConfigError) as info:
                attempt()
            messages.append(str(info.value))
    assert len(messages[0].splitlines()) == 1 and messages[0] == messages[1]
    return messages


def test_a_key_in_two_files_is_refused_naming_the_key_and_both_files(tmp_path: Path) -> None:
    write(tmp_path / "data" / "a.parquet", [1, 2, 3])
    write(tmp_path / "data" / "b.parquet", [3, 4])
    message = refusals(str(tmp_path / "data"))[0]
    assert message == (
        "key column 'id' of the Parquet dataset is not unique: key 3 appears on more than one row, in "
        "a.parquet, b.parquet; each row's result is stored under its key, so one would overwrite another: "
        "rewrite the files so that each key appears once, or choose a unique --key"
    )
    assert str(tmp_path) not in message, "the location is not echoed: it may come from a secret"


def test_repeats_in_one_row_group_and_across_row_groups_of_one_file(tmp_path: Path) -> None:
    write(tmp_path / "one.parquet", [5, 5, 6])
    assert "key 5 appears on more than one row, in one.parquet;" in refusals(str(tmp_path))[0]
    write(tmp_path / "one.parquet", [7, 8, 9, 7], row_group_size=2)
    assert "key 7 appears on more than one row, in one.parquet;" in refusals(str(tmp_path))[0]


def test_at_most_five_keys_are_named_the_smallest_first(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", list(range(100, 0, -1)), row_group_size=10)
    write(tmp_path / "b.parquet", list(range(50, 0, -1)), row_group_size=7)
    message = refusals(str(tmp_path))[0]
    assert "keys 1, 2, 3, 4, 5 (the first 5) appear on more than one row, in a.parquet, b.parquet;" in message


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (pa.string(), pa.large_string()),
        (pa.dictionary(pa.int32(), pa.string()), pa.string()),
    ],
    ids=["string and large_string", "dictionary and string"],
)
def test_text_keys_of_different_arrow_types_are_compared(tmp_path: Path, first: Any, second: Any) -> None:
    write(tmp_path / "a.parquet", ["doc-1", "doc-2"], first)
    write(tmp_path / "b.parquet", ["doc-2", "doc-3"], second)
    assert "key 'doc-2' appears on more than one row, in a.parquet, b.parquet;" in refusals(str(tmp_path))[0]


def test_integer_keys_of_different_widths_are_compared(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [1, 2], pa.int32())
    write(tmp_path / "b.parquet", [2, 3], pa.int64())
    assert "key 2 appears" in refusals(str(tmp_path))[0]


def test_files_without_statistics_are_read_and_their_null_keys_counted(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [1, None, 2, None], write_statistics=False, row_group_size=2)
    write(tmp_path / "b.parquet", [3, 4, None], write_statistics=False)
    with ParquetSource(str(tmp_path)) as source:
        source.check()
        plan = source.plan(shards=2)
    assert plan.params["null_keys"] == 3 and plan.params["null_keys_known"]
    assert plan.expected_rows == 4 == sum(s.expected_rows for s in plan.shards)
    write(tmp_path / "c.parquet", [None, 4], write_statistics=False)
    assert "key 4 appears on more than one row, in b.parquet, c.parquet;" in refusals(str(tmp_path))[0]


def test_null_keys_are_not_repeats(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [1, None, None])
    write(tmp_path / "b.parquet", [None, 2])
    with ParquetSource(str(tmp_path)) as source:
        source.check()
        assert source.plan().params["null_keys"] == 3


def test_an_only_new_plan_refuses_a_new_file_repeating_a_scored_key(tmp_path: Path) -> None:
    """The scored file is not read again, but its keys are current rows: the new one would overwrite one."""
    write(tmp_path / "a.parquet", [1, 2, 3])
    with ParquetSource(str(tmp_path)) as source:
        seen = frozenset(plan_objects(source.plan()))
        write(tmp_path / "b.parquet", [3, 4])
        with pytest.raises(
            ConfigError, match=r"key 3 appears on more than one row, in a.parquet, b.parquet;"
        ):
            source.plan(new_only=NewOnly("m1", "results", seen))


def _group(name: str, low: int, high: int) -> tuple[RowGroup, tuple[int, int]]:
    return RowGroup(ObjectInfo(name, "e", 1), 0, 10, 0, (low, high)), (low, high)


def test_only_row_groups_whose_key_ranges_overlap_are_held_together() -> None:
    """A dataset written in key order is checked one row group at a time."""
    ranged = [_group("d", 40, 45), _group("a", 1, 10), _group("b", 11, 20), _group("c", 15, 30)]
    assert [[g.obj.key for g in c] for c in _clusters(ranged)] == [["a"], ["b", "c"], ["d"]]
    texts = [
        (RowGroup(ObjectInfo("t", "e", 1), 0, 1, 0, ("x", "y")), ("x", "y")),
        (RowGroup(ObjectInfo("u", "e", 1), 0, 1, 0, ("a", "b")), ("a", "b")),
    ]
    assert [[g.obj.key for g in c] for c in _clusters(texts)] == [["u"], ["t"]]


def test_unique_keys_in_key_order_plan_as_before(tmp_path: Path) -> None:
    for part in range(3):
        write(tmp_path / f"part-{part}.parquet", list(range(part * 100, part * 100 + 100)), row_group_size=25)
    with ParquetSource(str(tmp_path)) as source:
        source.check()
        plan = source.plan(shards=4)
    assert plan.expected_rows == 300 and plan.params["null_keys"] == 0


@pytest.mark.s3
def test_a_key_in_two_s3_objects_is_refused(s3_env: Any, client: Any, bucket: str, tmp_path: Path) -> None:
    for name, keys in (("p/a.parquet", [1, 2]), ("p/b.parquet", [2, 3])):
        path = write(tmp_path / name, keys)
        client.put_object(Bucket=bucket, Key=name, Body=path.read_bytes())
    message = refusals(f"s3://{bucket}/p/")[0]
    assert "key 2 appears on more than one row, in a.parquet, b.parquet;" in message
    assert bucket not in message


def test_the_run_of_the_issue_is_refused_before_anything_is_scored(
    tmp_path: Path, sqlite_url: str, pipeline: Any
) -> None:
    from flow_data import execute

    write(tmp_path / "data" / "a.parquet", [1, 2, 3])
    write(tmp_path / "data" / "b.parquet", [3, 4])
    spec = flat_spec(model="tiny", source=str(tmp_path / "data"), results=sqlite_url, results_table="scores")
    with pytest.raises(ConfigError, match="key 3 appears on more than one row"):
        pipeline.run(spec, "dup")
    assert execute(sqlite_url, "SELECT name FROM sqlite_master WHERE name = 'scores'") == []
