"""Every input row ends as exactly one of a result, a dead letter or a counted skip, on every source kind.

``input rows = results + dead letters + skipped``, with rows whose text is
NULL, empty or blank (dead letters) and rows whose key is NULL (skipped: a
dead letter needs a key, see :mod:`shardwise.pipeline.skipped`). Once a
NULL-key row disappeared with nothing said (issue 24). The counts are
checked three ways: what the run says (its counts and its plan's skips),
what the stores hold (results and ``shardwise_errors`` rows of the run), and
the rows the test wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import sqlalchemy as sa
from flow_data import execute
from image_builders import tiny_vit_classifier
from spec_builder import flat_spec, respec

from shardwise.pipeline import RunSpec
from shardwise.pipeline.skipped import Skipped
from shardwise.sources.images import ImageAccess

GOOD = [(k, f"paragraph number {k} about shards, batches and merges") for k in range(1, 9)]
DEAD = [(9, None), (10, ""), (11, "  \t ")]
KEYLESS = [(None, "a row without a key"), (None, None)]
ROWS = [*GOOD[:4], *DEAD[:2], KEYLESS[0], *GOOD[4:], DEAD[2], KEYLESS[1]]
"""The input: 8 to score, 3 to dead-letter, 2 to skip, interleaved."""


def _accounted(planned: Any, counts: Any, results_url: str, inputs: int = len(ROWS)) -> Skipped:
    """Check the identity three ways; return what was skipped."""
    run_id = planned.record.run_id
    stored = execute(results_url, "select count(*) from scores where run_id = :r", {"r": run_id})[0][0]
    letters = execute(results_url, "select count(*) from shardwise_errors where run_id = :r", {"r": run_id})
    skipped = Skipped.of(planned.plan)
    assert (counts.rows_out, counts.rows_failed) == (stored, letters[0][0])
    assert counts.rows_in == counts.rows_out + counts.rows_failed
    assert counts.rows_out + counts.rows_failed + skipped.total == inputs, (counts, skipped)
    return skipped


def _first_and_again(pipeline: Any, spec: RunSpec, results_url: str, by_object: bool = False) -> None:
    """A run, then an only-new run: the same input rows, accounted for both times.

    ``by_object``: only-new skips whole Parquet objects already scored, NULL keys and dead letters too.
    """
    planned, counts = pipeline.run(spec, "first")
    skipped = _accounted(planned, counts, results_url)
    assert (counts.rows_out, counts.rows_failed, skipped) == (8, 3, Skipped(null_key=2))
    (warning,) = planned.warnings()
    assert warning.startswith("2 rows") and "have NULL in key column 'id', so they are skipped" in warning
    again = respec(spec, only_new=True)
    planned, counts = pipeline.run(again, "again")
    skipped = _accounted(planned, counts, results_url)
    if by_object:  # 8 scored, 3 dead letters, 2 NULL keys: read, not all "already scored"
        assert (counts.rows_out, counts.rows_failed, skipped) == (0, 0, Skipped(already_read=13))
        assert (
            skipped.describe()
            == "13 skipped (13 in files a completed run already read, scored or dead-lettered)"
        )
    else:  # a dead letter has no result: it is new every time
        assert (counts.rows_out, counts.rows_failed, skipped) == (0, 3, Skipped(2, already_scored=8))


def _table(url: str, unique: str = "") -> None:
    with sa.create_engine(url).begin() as conn:
        conn.execute(sa.text(f"create table docs (id bigint {unique}, text text)"))
        conn.execute(sa.text("insert into docs values (:k, :t)"), [{"k": k, "t": t} for k, t in ROWS])


def _spec(source: str, results: str, **more: Any) -> RunSpec:
    table = {"table": "docs"} if "://" in source and not source.startswith("s3://") else {}
    return flat_spec(model="tiny", source=source, results=results, results_table="scores", **table, **more)


def test_sqlite(sqlite_url: str, pipeline: Any) -> None:
    _table(sqlite_url)
    _first_and_again(pipeline, _spec(sqlite_url, sqlite_url, shards=3), sqlite_url)


@pytest.mark.postgres
def test_postgres(pg_url: str, pipeline: Any) -> None:
    _table(pg_url, "unique")  # a declared unique key: NULLs are allowed, repeats are not
    _first_and_again(pipeline, _spec(pg_url, pg_url, shards=3), pg_url)


@pytest.mark.postgres
def test_postgres_with_results_elsewhere(pg_url: str, sqlite_url: str, pipeline: Any) -> None:
    """Only-new as a keyed plan (the sink is asked what it holds): its skips are counted too."""
    _table(pg_url)
    _first_and_again(pipeline, _spec(pg_url, sqlite_url, shards=3), sqlite_url)


def _parquet_files(folder: Path) -> list[Path]:
    """The rows in two files, the second written without statistics (so without null counts)."""
    folder.mkdir(parents=True, exist_ok=True)
    halves = [ROWS[:7], ROWS[7:]]
    paths = []
    for number, (half, stats) in enumerate(zip(halves, (True, False), strict=True)):
        keys, texts = zip(*half, strict=True)
        table = pa.table({"id": pa.array(keys, pa.int64()), "text": pa.array(texts, pa.string())})
        path = folder / f"part-{number}.parquet"
        pq.write_table(table, path, row_group_size=3, write_statistics=stats)
        paths.append(path)
    return paths


def test_local_parquet(tmp_path: Path, sqlite_url: str, pipeline: Any) -> None:
    _parquet_files(tmp_path / "data")
    _first_and_again(pipeline, _spec(str(tmp_path / "data"), sqlite_url, shards=2), sqlite_url, True)


@pytest.mark.s3
def test_parquet_on_s3(s3_env: Any, tmp_path: Path, sqlite_url: str, pipeline: Any) -> None:
    client, bucket = s3_env.client(), "accounting"
    client.create_bucket(Bucket=bucket)
    for path in _parquet_files(tmp_path / "data"):
        client.put_object(Bucket=bucket, Key=f"in/{path.name}", Body=path.read_bytes())
    _first_and_again(pipeline, _spec(f"s3://{bucket}/in/", sqlite_url, shards=2), sqlite_url, True)


def test_image_column(tmp_path: Path, sqlite_url: str, pipeline: Any) -> None:
    """Bytes that are no picture are dead letters, a missing file and a NULL too; NULL keys skipped."""
    (tmp_path / "a.png").write_bytes(b"an image's bytes")
    rows = [(1, str(tmp_path / "a.png")), (2, str(tmp_path / "missing.png")), (3, None), (None, "x.png")]
    with sa.create_engine(sqlite_url).begin() as conn:
        conn.execute(sa.text("create table docs (id bigint, img text)"))
        conn.execute(sa.text("insert into docs values (:k, :i)"), [{"k": k, "i": i} for k, i in rows])
    declared = ImageAccess(roots=(str(tmp_path),))  # the missing file is looked for, not refused
    spec = _spec(sqlite_url, sqlite_url, image_column="img", image_access=declared)
    spec = respec(spec, model=str(tiny_vit_classifier(tmp_path / "vit")))  # an image model
    planned, counts = pipeline.run(spec, "images")
    skipped = _accounted(planned, counts, sqlite_url, inputs=len(rows))
    assert (counts.rows_out, counts.rows_failed, skipped) == (0, 3, Skipped(null_key=1))
