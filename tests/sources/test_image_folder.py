"""An image folder as a source: a local folder and an S3 prefix whose image objects are the rows."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from shardwise.errors import ConfigError, SourceError
from shardwise.model.binary_value import BinaryValue
from shardwise.sources import ImageFolderSource, ParquetSource, open_source, plan_objects
from shardwise.sources.base import NewOnly, ReadFrom, SourcePlan

IMAGES = {"a.jpg": b"jpeg-a", "b/c.PNG": b"png-c", "b/d.webp": b"webp-d", "e.tiff": b"tiff-e"}
OTHER = {"_SUCCESS": b"", "notes.txt": b"hello"}


def write_folder(root: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def rows_of(source: ImageFolderSource, plan: SourcePlan) -> list[tuple[str, bytes | None]]:
    out = []
    for shard in plan.shards:
        for row in source.read(plan, shard):
            assert isinstance(row.value, BinaryValue)
            out.append((row.key, row.value.data))
    return out


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return write_folder(tmp_path / "photos", {**IMAGES, **OTHER})


def test_local_rows_are_relative_keys_and_bytes_in_order(folder: Path) -> None:
    with open_source(str(folder)) as source:
        assert isinstance(source, ImageFolderSource)
        plan = source.plan(rows_per_shard=3)
        assert [s.expected_rows for s in plan.shards] == [3, 1]
        assert rows_of(source, plan) == sorted(IMAGES.items())
        assert plan.params["ignored_objects"] == 2 and plan.params["images"] is True
        assert {key for key, _ in plan_objects(plan)} == {str(folder / n) for n in IMAGES}


def test_plan_is_deterministic_and_round_trips(folder: Path) -> None:
    with ImageFolderSource(str(folder)) as source:
        first, second = source.plan(shards=2), source.plan(shards=2)
        assert first.to_json() == second.to_json()
        again = SourcePlan.from_json(first.to_json())
        assert rows_of(source, again) == sorted(IMAGES.items())


def test_resume_skips_the_first_rows(folder: Path) -> None:
    with ImageFolderSource(str(folder)) as source:
        plan = source.plan(shards=1)
        with source.open_reader(plan, plan.shards[0], ReadFrom(rows=2, key="b/c.PNG")) as reader:
            assert [r.key for r in reader.rows] == ["b/d.webp", "e.tiff"]


def test_object_deleted_or_changed_after_planning_is_the_rows_error(folder: Path) -> None:
    with ImageFolderSource(str(folder)) as source:
        plan = source.plan(shards=1)
        (folder / "a.jpg").unlink()
        (folder / "e.tiff").write_bytes(b"a longer, rewritten tiff")
        values = {r.key: r.value for r in source.read(plan, plan.shards[0])}
    assert values["a.jpg"].data is None and "no such file" in str(values["a.jpg"].error)
    assert values["e.tiff"].data is None and "changed since it was planned" in str(values["e.tiff"].error)
    assert values["b/d.webp"].data == b"webp-d"


def test_read_keys_for_a_redrive(folder: Path) -> None:
    with ImageFolderSource(str(folder)) as source:
        got = [(r.key, r.value.data) for r in source.read_keys(["e.tiff", "a.jpg", "gone.jpg"])]
    assert got == [("a.jpg", b"jpeg-a"), ("e.tiff", b"tiff-e")]


def test_only_new_skips_seen_objects_and_reads_a_new_one(folder: Path) -> None:
    with ImageFolderSource(str(folder)) as source:
        seen = frozenset(plan_objects(source.plan()))
        new_only = NewOnly("m@1", "results", seen)
        assert source.plan(new_only=new_only).shards == ()
        write_folder(folder, {"b/new.gif": b"gif-new"})
        plan = source.plan(new_only=new_only)
    assert plan.params["skipped_objects"] == 4
    with ImageFolderSource(str(folder)) as source:
        assert rows_of(source, plan) == [("b/new.gif", b"gif-new")]


def test_which_locations_are_image_folders(tmp_path: Path, folder: Path) -> None:
    with open_source(str(folder), image_column="img") as source:
        assert isinstance(source, ParquetSource)  # a Parquet dataset's image column, as before
    write_folder(folder, {"part-0.parquet": b"PAR1"})
    with pytest.raises(ConfigError, match=r"both Parquet files \(1\) and image files \(4\)"):
        open_source(str(folder))
    with pytest.raises(ConfigError, match="takes no --key"):
        open_source(str(write_folder(tmp_path / "only", IMAGES)), key="path")
    with pytest.raises(SourceError, match="no image objects"):
        ImageFolderSource(str(write_folder(tmp_path / "none", OTHER))).plan()


@pytest.mark.s3
def test_s3_prefix_rows_only_new_and_changed_objects(s3_env) -> None:
    client = s3_env.client()
    bucket = f"imgs-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    for name, data in {**IMAGES, **OTHER, "../outside.jpg": b"x"}.items():
        key = "elsewhere.jpg" if name.startswith("..") else f"photos/{name}"
        client.put_object(Bucket=bucket, Key=key, Body=data)
    with open_source(f"s3://{bucket}/photos/") as source:
        assert isinstance(source, ImageFolderSource)
        plan = source.plan(shards=2)
        assert rows_of(source, plan) == sorted(IMAGES.items())
        client.put_object(Bucket=bucket, Key="photos/a.jpg", Body=b"replaced")
        client.delete_object(Bucket=bucket, Key="photos/e.tiff")
        values = {r.key: r.value for s in plan.shards for r in source.read(plan, s)}
        assert "changed since it was planned" in str(values["a.jpg"].error)
        assert "no such object" in str(values["e.tiff"].error)
        client.put_object(Bucket=bucket, Key="photos/z.bmp", Body=b"bmp-z")
        fresh = source.plan(new_only=NewOnly("m@1", "results", frozenset(plan_objects(plan))))
        assert rows_of(source, fresh) == [("a.jpg", b"replaced"), ("z.bmp", b"bmp-z")]
