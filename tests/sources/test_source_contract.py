"""The source contract (shardwise.testing.source) over every built-in source kind: SQLite and PostgreSQL
tables, Parquet files, CSV and JSON Lines files, and a folder of pictures (a row per file, keyed by its
name)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa

from shardwise.sources.registry import kind_names
from shardwise.testing import SOURCE_CHECKS, SourcePlace, SourceSample
from shardwise.testing.source import sample_for

SAMPLES = [
    pytest.param("sql", id="sql-sqlite"),
    pytest.param("sql-postgres", id="sql-postgres", marks=pytest.mark.postgres),
    pytest.param("parquet", id="parquet"),
    pytest.param("csv", id="csv-jsonl"),
    pytest.param("csv-csv", id="csv-csv"),
    pytest.param("images", id="images"),
]


def _postgres(url: str) -> SourceSample:
    def write(rows: dict[int, str | None]) -> SourcePlace:
        engine = sa.create_engine(url)
        with engine.begin() as db:
            db.execute(sa.text("create table if not exists docs (id bigint primary key, text text)"))
            db.execute(
                sa.text("insert into docs values (:k, :v)"), [{"k": k, "v": v} for k, v in rows.items()]
            )
        engine.dispose()
        return SourcePlace("sql", url, table="docs")

    return SourceSample("sql", write)


def _csv_files(folder: Path) -> SourceSample:
    def write(rows: dict[int, str | None]) -> SourcePlace:
        folder.mkdir(exist_ok=True)
        lines = "".join(f'{k},"{"" if v is None else v}"\n' for k, v in rows.items())
        (folder / f"part-{len(list(folder.iterdir()))}.csv").write_text("id,text\n" + lines)
        return SourcePlace("csv", str(folder))

    return SourceSample("csv", write)


@pytest.fixture(params=SAMPLES)
def sample(request: pytest.FixtureRequest, tmp_path: Path) -> SourceSample:
    if request.param == "sql-postgres":
        return _postgres(request.getfixturevalue("pg_url"))
    if request.param == "csv-csv":
        return _csv_files(tmp_path / "data")
    return sample_for(request.param, tmp_path)


def test_every_built_in_kind_is_put_through_the_contract() -> None:
    assert {p.values[0].split("-")[0] for p in SAMPLES} == set(kind_names())


@pytest.mark.parametrize("check", SOURCE_CHECKS.values(), ids=SOURCE_CHECKS.keys())
def test_the_source_contract_holds(sample: SourceSample, check: Callable[[SourceSample], None]) -> None:
    check(sample)
