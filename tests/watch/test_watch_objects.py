"""ObjectWatcher on moto's S3 HTTP server and on a local folder: new, seen and re-uploaded objects."""

from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from watch_helpers import Recorder

from shardwise.watch import ObjectWatcher, WatchSpec


def parquet(ids: list[int]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.table({"id": ids, "text": [f"doc {i}" for i in ids]}), buffer)
    return buffer.getvalue()


@pytest.mark.s3
def test_s3_objects_are_announced_once_per_etag(s3_endpoint: Any) -> None:
    client = s3_endpoint.client()
    bucket = f"watch-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    client.put_object(Bucket=bucket, Key="in/a.parquet", Body=parquet([1, 2]))
    client.put_object(Bucket=bucket, Key="in/_SUCCESS", Body=b"")  # not Parquet: never announced
    scored: set[tuple[str, str]] = set()
    recorder = Recorder()
    spec = WatchSpec(f"s3://{bucket}/in/", "landing")
    with ObjectWatcher(spec, recorder, seen=lambda: frozenset(scored), s3_client=client) as watcher:
        assert watcher.poll_once() == 1
        assert watcher.poll_once() == 0  # same listing: nothing new
        [first] = recorder.take()
        assert first["location"] == f"s3://{bucket}/in" and first["count"] == 1
        [obj] = first["objects"]
        assert obj["key"] == f"s3://{bucket}/in/a.parquet" and obj["size"] > 0

        client.put_object(Bucket=bucket, Key="in/a.parquet", Body=parquet([1, 2, 3]))  # re-upload
        client.put_object(Bucket=bucket, Key="in/b.parquet", Body=parquet([4]))
        head = client.head_object(Bucket=bucket, Key="in/b.parquet")
        scored.add((f"s3://{bucket}/in/b.parquet", head["ETag"].strip('"')))  # the ledger saw b already
        assert watcher.poll_once() == 1
        [again] = recorder.take()
        assert [o["key"] for o in again["objects"]] == [f"s3://{bucket}/in/a.parquet"]
        assert again["objects"][0]["etag"] != obj["etag"]
        assert watcher.poll_once() == 0

    resource = {"prefect.resource.id": "shardwise.source.landing", "prefect.resource.name": "landing"}
    assert all(r == resource for _, r, _ in recorder.events)


def test_local_folder_groups_one_listing_into_one_event(tmp_path: Path) -> None:
    recorder = Recorder()
    with ObjectWatcher(WatchSpec(str(tmp_path), "local"), recorder, max_listed=2) as watcher:
        assert watcher.poll_once() == 0  # an empty folder is not an error for a watcher
        for i in range(3):
            (tmp_path / f"part-{i}.parquet").write_bytes(parquet([i]))
        assert watcher.poll_once() == 1
        [payload] = recorder.take()
        assert payload["count"] == 3 and len(payload["objects"]) == 2
        assert payload["bytes"] == sum(os.path.getsize(tmp_path / f"part-{i}.parquet") for i in range(3))
        assert watcher.poll_once() == 0


def test_pictures_landing_in_an_image_folder_are_announced(tmp_path: Path) -> None:
    recorder = Recorder()
    with ObjectWatcher(WatchSpec(str(tmp_path), "uploads"), recorder) as watcher:
        (tmp_path / "a.png").write_bytes(b"\x89PNG picture a")
        (tmp_path / "b.JPG").write_bytes(b"\xff\xd8 picture b")
        (tmp_path / "notes.txt").write_bytes(b"not announced")
        assert watcher.poll_once() == 1
        [payload] = recorder.take()
        assert payload["count"] == 2 and sorted(Path(o["key"]).name for o in payload["objects"]) == [
            "a.png",
            "b.JPG",
        ]
        assert watcher.poll_once() == 0
