"""A run over hostile image references (issue 34, item 1): each is a dead letter whose only trace is its
reason, nothing of it read, scored or fingerprinted, while the pictures under the declared root are scored.

The references sit in a SQLite table and in a Parquet file; an image classifier scores the rows, so a
picture read from outside the root would be a result row, and a non-picture read would leave its MD5
as the dead letter's fingerprint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from flow_data import execute
from hostile_refs import Hostile, fifo_unblocked, hostile_refs, no_reader_left
from image_builders import encoded, picture, tiny_vit_classifier
from spec_builder import flat_spec, respec

from shardwise.sources.images import ImageAccess


@pytest.fixture
def hostile(tmp_path: Path) -> Hostile:
    return hostile_refs(tmp_path / "files", encoded(picture("RGB", (24, 20)), "PNG"))


def _sqlite_source(tmp_path: Path, refs: dict[int, str]) -> dict[str, Any]:
    url = f"sqlite:///{tmp_path / 'photos.db'}"
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("create table photos (id integer primary key, img text)"))
        conn.execute(
            sa.text("insert into photos values (:k, :r)"), [{"k": k, "r": r} for k, r in refs.items()]
        )
    engine.dispose()
    return {"source": url, "table": "photos"}


def _parquet_source(tmp_path: Path, refs: dict[int, str]) -> dict[str, Any]:
    (tmp_path / "data").mkdir()
    table = pa.table({"id": pa.array(list(refs), pa.int64()), "img": pa.array(list(refs.values()))})
    pq.write_table(table, tmp_path / "data" / "part-0.parquet")
    return {"source": str(tmp_path / "data")}


@pytest.mark.parametrize("make", [_sqlite_source, _parquet_source], ids=["sqlite", "parquet"])
def test_hostile_references_leave_only_their_reasons(
    make: Any, tmp_path: Path, hostile: Hostile, pipeline: Any
) -> None:
    results = f"sqlite:///{tmp_path / 'results.db'}"
    source = make(tmp_path, {**hostile.good, **hostile.refused})
    spec = flat_spec(
        **source,
        model=str(tiny_vit_classifier(tmp_path / "vit")),
        image_column="img",
        image_access=ImageAccess(roots=(str(hostile.root),)),
        results=results,
        results_table="labels",
        precision="fp32",
    )
    with fifo_unblocked(hostile.fifo):
        _, counts = pipeline.run(spec, "hostile")
    assert (counts.rows_out, counts.rows_failed) == (len(hostile.good), len(hostile.refused))
    scored = execute(results, "select source_key, input_fingerprint from labels order by source_key")
    assert [int(k) for k, _ in scored] == sorted(hostile.good)
    assert all(f for _, f in scored)  # the pictures under the root: scored, fingerprinted

    letters = execute(
        results, "select source_key, error_class, message, input_fingerprint from shardwise_errors"
    )
    assert sorted(int(k) for k, *_ in letters) == sorted(hostile.refused)
    for key, error_class, message, fingerprint in letters:
        ref = hostile.refused[int(key)]
        assert error_class == "InputError"
        assert message.startswith(f"image {ref}: refused: "), message
        assert fingerprint is None, (key, fingerprint)  # no MD5 of anything it could have read
        fix = (
            "--image-bucket"
            if ref.startswith("s3://")
            else "only regular files"
            if key == "6"
            else "--image-root"
        )
        assert fix in message, message
    assert no_reader_left(hostile.fifo)


def test_without_a_root_the_good_pictures_are_refused_until_a_redrive_declares_one(
    tmp_path: Path, hostile: Hostile, pipeline: Any
) -> None:
    """The default is to read no local file: declaring a root is what lets a run read pictures."""
    results = f"sqlite:///{tmp_path / 'results.db'}"
    spec = flat_spec(
        **_sqlite_source(tmp_path, hostile.good),
        model=str(tiny_vit_classifier(tmp_path / "vit")),
        image_column="img",
        results=results,
        results_table="labels",
        precision="fp32",
    )
    _, counts = pipeline.run(spec, "no-root")
    assert (counts.rows_out, counts.rows_failed) == (0, len(hostile.good))
    for (message,) in execute(results, "select message from shardwise_errors"):
        assert "refused: no image root is declared" in message and "--image-root DIR" in message

    declared = ImageAccess(roots=(str(hostile.root),))  # the fix the message names, then a redrive
    _, counts = pipeline.run(respec(spec, redrive="no-root", image_access=declared), "redrive")
    assert (counts.rows_out, counts.rows_failed) == (len(hostile.good), 0)  # read now: their input changed
