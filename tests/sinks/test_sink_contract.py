"""The sink contract (shardwise.testing.sink) over every built-in sink kind, at each place it writes:
SQLite and PostgreSQL tables, Delta, Parquet and Iceberg tables in a folder and on S3 (moto)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from shardwise.errors import ConfigError
from shardwise.sinks.base import Sink
from shardwise.sinks.registry import sink_kinds
from shardwise.testing import SINK_CHECKS, SinkPlace
from shardwise.testing.rows import LAYOUT, OTHER_LAYOUT, chunk

_S3 = pytest.mark.s3
_PG = pytest.mark.postgres
PLACES = [
    pytest.param(("sql", "sqlite"), id="sql-sqlite"),
    pytest.param(("sql", "postgres"), id="sql-postgres", marks=_PG),
    pytest.param(("delta", "local"), id="delta-local"),
    pytest.param(("delta", "s3"), id="delta-s3", marks=_S3),
    pytest.param(("parquet", "local"), id="parquet-local"),
    pytest.param(("parquet", "s3"), id="parquet-s3", marks=_S3),
    pytest.param(("iceberg", "local"), id="iceberg-local"),
    pytest.param(("iceberg", "postgres"), id="iceberg-postgres-catalog", marks=_PG),
    pytest.param(("iceberg", "s3"), id="iceberg-s3", marks=_S3),
]
LAKES = ["delta", "parquet", "iceberg"]
CHECKS = [
    pytest.param(check, id=name, marks=[pytest.mark.slow] if name == "kill mid-commit" else [])
    for name, check in SINK_CHECKS.items()
]


@pytest.fixture(params=PLACES)
def place(request: pytest.FixtureRequest, tmp_path) -> SinkPlace:
    kind, where = request.param
    if kind == "sql":
        url = request.getfixturevalue("pg_url") if where == "postgres" else f"sqlite:///{tmp_path / 'r.db'}"
        return SinkPlace(kind, url)
    location = request.getfixturevalue("s3_lake") if where == "s3" else str(tmp_path / "lake")
    if kind == "iceberg" and where != "local":
        catalog = (
            request.getfixturevalue("pg_url") if where == "postgres" else f"sqlite:///{tmp_path / 'c.db'}"
        )
        return SinkPlace(kind, location, {"iceberg_catalog": catalog})
    return SinkPlace(kind, location)


def test_every_built_in_kind_is_put_through_the_contract() -> None:
    assert set(sink_kinds()) == {kind for kind, _ in (p.values[0] for p in PLACES)}


@pytest.mark.parametrize("check", CHECKS)
def test_the_sink_contract_holds(place: SinkPlace, check: Callable[[SinkPlace], Sink]) -> None:
    check(place)


def test_rows_read_back_carry_their_lineage(place: SinkPlace) -> None:
    sink = place.open()
    sink.ensure()
    sink.commit(chunk(0))
    for r in sink.read():
        assert r["run_id"] == "run-a" and r["scored_at"].utcoffset().total_seconds() == 0


@pytest.mark.parametrize("kind", LAKES)
def test_a_lake_table_of_another_layout_is_refused_naming_the_column(kind: str, tmp_path) -> None:
    place = SinkPlace(kind, str(tmp_path / "lake"))
    place.open().ensure()
    other = place.open(layout=OTHER_LAYOUT)
    for step in (other.check, other.ensure):
        with pytest.raises(ConfigError, match=r"different layout: column 'source_key' .*--results-table"):
            step()


@pytest.mark.parametrize("kind", LAKES)
def test_a_lake_target_names_its_kind_and_location_and_no_secret(kind: str, location: str, tmp_path) -> None:
    catalog = kind == "iceberg" and location.startswith("s3://")  # no default catalog for an S3 warehouse
    options = {"iceberg_catalog": f"sqlite:///{tmp_path / 'c.db'}"} if catalog else {}
    sink = SinkPlace(kind, location, options).open(layout=LAYOUT)
    assert sink.target == f"{kind}:{location}/res"
    assert "testing" not in sink.target
