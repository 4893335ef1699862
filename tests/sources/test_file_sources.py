"""What every file kind gets from shardwise.sources.files: one folder of mixed files, each kind its own."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import ConfigError, SourceError
from shardwise.sources import ImageFolderSource, ParquetSource, plan_objects
from shardwise.sources.base import NewOnly
from shardwise.sources.csv_jsonl import CsvJsonlSource
from shardwise.sources.files.source import FileSource
from shardwise.sources.files.stores import open_store

KINDS: list[type[FileSource]] = [ParquetSource, CsvJsonlSource, ImageFolderSource]


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """One file of each kind, and a marker no kind reads."""
    pq.write_table(pa.table({"id": [1, 2], "text": ["a", "b"]}), tmp_path / "rows.parquet")
    (tmp_path / "rows.csv").write_text("id,text\n3,c\n4,d\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cat.PNG").write_bytes(b"png")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    return tmp_path


def test_a_store_lists_the_names_of_its_suffixes_and_counts_the_rest(mixed: Path) -> None:
    listing = open_store(str(mixed), suffixes=(".png", ".csv")).listing()
    assert [Path(o.key).name for o in listing.objects] == ["rows.csv", "cat.PNG"] and listing.ignored == 2
    every = open_store(str(mixed)).listing()
    assert len(every.objects) == 4 and every.ignored == 0


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_each_kind_plans_only_its_own_files(mixed: Path, kind: type[FileSource]) -> None:
    with kind(str(mixed)) as source:
        source.check()
        plan = source.plan()
    suffix = [Path(key).suffix.lower() for key, _ in plan_objects(plan)]
    assert suffix == [s for s in (".parquet", ".csv", ".png") if s in kind.suffixes]
    assert plan.kind == kind.kind and plan.by_objects and plan.params["ignored_objects"] == 3


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_a_location_without_the_kind_s_files_is_refused_naming_them(
    tmp_path: Path, kind: type[FileSource]
) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with kind(str(tmp_path)) as source, pytest.raises(SourceError) as refused:
        source.check()
    message = str(refused.value)
    assert message.startswith(f"no {kind.files} at {str(tmp_path)!r} (1 other objects ignored")
    assert all(suffix in message for suffix in kind.suffixes)


@pytest.mark.parametrize("planner", KINDS, ids=lambda k: k.kind)
def test_a_plan_is_read_only_by_a_source_of_its_kind(mixed: Path, planner: type[FileSource]) -> None:
    with planner(str(mixed)) as source:
        plan = source.plan()
    for reader in KINDS:
        if reader is planner:
            continue
        refused = pytest.raises(ConfigError, match="does not match this source")
        with reader(str(mixed)) as other, refused, other.open_reader(plan, plan.shards[0]):
            pass


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_only_new_skips_the_seen_objects_and_records_its_rule(mixed: Path, kind: type[FileSource]) -> None:
    with kind(str(mixed)) as source:
        seen = frozenset(plan_objects(source.plan()))
        again = source.plan(new_only=NewOnly("m@1", "results", seen))
    assert again.shards == () and again.params["skipped_objects"] == 1
    assert again.params["new_only"] == {"model_version": "m@1", "results_table": "results", "seen_objects": 1}


def test_files_of_two_key_types_are_refused() -> None:
    from shardwise.sources.files.source import one_key_type

    assert one_key_type(["int", None, "int"]) == "int" and one_key_type([None]) is None
    with pytest.raises(SourceError, match="integer in some files and text in others"):
        one_key_type(["int", "text"])
