"""IcebergSink in a local warehouse and on S3 (moto in its own process), its catalog SQLite or PostgreSQL:
each chunk once, the merge rule, and the kind's checks."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from spec_builder import flat_spec

from shardwise.errors import ConfigError
from shardwise.flags import flag_name
from shardwise.records import ResultRow
from shardwise.retry_policy import RetryPolicy
from shardwise.sinks.base import SinkChunk, SinkCommit
from shardwise.sinks.iceberg import DEFAULT_CATALOG_FILE, KIND, IcebergOptions
from shardwise.sinks.iceberg.sink import IcebergSink
from shardwise.sinks.registry import Destination, sink_kind
from shardwise.sources.base import KeyType
from shardwise.testing.rows import LAYOUT, OTHER_LAYOUT, ROWS_PER_CHUNK, chunk, lineage, row
from shardwise.testing.sink import SinkPlace, stale_commit_meets_the_seal


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def catalog(request: pytest.FixtureRequest, location: str, tmp_path) -> str | None:
    """The catalog URL: the default SQLite file of a local warehouse (None), an SQLite file beside an S3
    warehouse, or a fresh PostgreSQL database of the test's own."""
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_url"))
    if location.startswith("s3://"):
        return f"sqlite:///{tmp_path / 'catalog.db'}"
    return None


@pytest.fixture
def make(catalog: str | None) -> Any:
    """Sinks as the lake contract makes them: ``make(location, table, layout)``."""
    return functools.partial(_sink, catalog=catalog)


def _sink(location: str, table: str, layout: Any, *, catalog: str | None, **kwargs: Any) -> IcebergSink:
    return IcebergSink(location, table, layout, catalog=catalog, **kwargs)


def test_a_stale_commit_in_flight_when_the_shard_is_sealed_writes_nothing(
    catalog: str | None, location: str
) -> None:
    options = {} if catalog is None else {"iceberg_catalog": catalog}
    stale_commit_meets_the_seal(SinkPlace("iceberg", location, options), "_existing")


def test_the_merge_rule_keeps_same_inputs_replaces_changed_ones_and_adds_versions(
    make: Any, location: str
) -> None:
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    sink.commit(chunk(0))
    same = sink.commit(chunk(0, run_id="run-b", salt="b"))
    assert (same.status, same.inserted, same.updated, same.unchanged) == ("written", 0, 0, ROWS_PER_CHUNK)
    changed = sink.commit(chunk(0, run_id="run-c", keys=range(25, 75), fingerprint="fp2", salt="c"))
    assert (changed.inserted, changed.updated, changed.unchanged) == (25, 25, 0)
    beside = sink.commit(chunk(0, run_id="run-d", model_version="v2"))
    assert (beside.inserted, beside.updated, beside.unchanged) == (ROWS_PER_CHUNK, 0, 0)
    assert sink.commit(chunk(0, run_id="run-b", salt="b")).status == "already"
    v1 = sink.read("v1")
    assert [r["source_key"] for r in v1] == list(range(75))
    assert {r["run_id"] for r in v1 if r["source_key"] < 25} == {"run-a"}
    assert {(r["run_id"], r["input_fingerprint"]) for r in v1 if r["source_key"] >= 25} == {("run-c", "fp2")}
    assert np.array_equal(v1[30]["embedding"], row(30, salt="c").values["embedding"])
    assert len(sink.read()) == 75 + ROWS_PER_CHUNK


def test_a_commit_whose_answer_was_lost_is_retried_and_writes_nothing_twice(
    make: Any, location: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store took the commit, then the answer was lost (a cut connection): the sink's retry finds the
    chunk among the table's snapshots and answers ``already`` with the record stored the first time."""
    sink = make(location, "res", LAYOUT)
    sink.ensure()
    write, lost = sink._write, []

    def write_then_lose(*args: Any) -> SinkCommit:
        done = write(*args)
        if not lost:
            lost.append(done)
            raise OSError("connection reset by peer")
        return done

    monkeypatch.setattr(sink, "_write", write_then_lose)
    done = sink.commit(chunk(0))
    assert lost == [SinkCommit("written", chunk(0).position, inserted=ROWS_PER_CHUNK)]
    assert done == SinkCommit("already", chunk(0).position, inserted=ROWS_PER_CHUNK)
    assert sink.commit(chunk(0)).status == "already"
    assert [r["source_key"] for r in sink.read()] == list(range(ROWS_PER_CHUNK))
    table = sink._table()
    carried = [s for s in table.snapshots() if (s.summary or {}).get("shardwise.chunk") is not None]
    assert len(carried) == 1


def test_keys_repeated_in_a_chunk_keep_the_last_row(tmp_path) -> None:
    sink = IcebergSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    rows = [row(1, "old"), row(2), row(1, "new")]
    done = sink.commit(SinkChunk("run-a", 0, 0, rows, lineage(), {"rows": 3, "key": 1}))
    assert done.inserted == 2
    assert [(r["source_key"], r["input_fingerprint"]) for r in sink.read()] == [(1, "new"), (2, "fp")]


def test_text_keys_and_vectors_round_trip_as_list_of_float(tmp_path) -> None:
    sink = IcebergSink(str(tmp_path), "analytics.docs", OTHER_LAYOUT)
    assert sink.stored_key_type() is None
    sink.ensure()
    rows = [ResultRow(f"k{i}", {"embedding": row(i).values["embedding"]}, "fp") for i in (3, 1, 2)]
    assert sink.commit(SinkChunk("run-a", 0, 0, rows, lineage(), {"rows": 3, "key": "k2"})).inserted == 3
    assert sink.stored_key_type() == "text"
    found = sink.read()
    assert [r["source_key"] for r in found] == ["k1", "k2", "k3"]
    assert found[0]["embedding"].dtype == np.float32
    assert np.array_equal(found[0]["embedding"], row(1).values["embedding"])
    assert sorted(sink.committed_inputs("v1")) == [("k1", "fp"), ("k2", "fp"), ("k3", "fp")]
    schema = sink._table().schema()
    assert str(schema.find_field("embedding").field_type) == "list<float>"
    assert str(schema.find_field("source_key").field_type) == "string"


def test_a_local_warehouse_keeps_its_default_sqlite_catalog_that_pyiceberg_reads(tmp_path) -> None:
    warehouse = tmp_path / "wh"
    sink = IcebergSink(str(warehouse), "res", LAYOUT)
    sink.check()  # nothing there: nothing to refuse, nothing made
    assert not warehouse.exists()
    sink.ensure()
    sink.commit(chunk(0))
    sink.close()
    catalog_file = warehouse / DEFAULT_CATALOG_FILE
    assert catalog_file.is_file()
    catalog = SqlCatalog("shardwise", uri=f"sqlite:///{catalog_file}", warehouse=f"file://{warehouse}")
    table = catalog.load_table("shardwise.res").scan().to_arrow()
    assert table.num_rows == ROWS_PER_CHUNK
    assert table.schema.field("embedding").type.equals(pa.list_(pa.float32()))
    expected = {"run_id", "shard_id", "model_name", "model_version", "input_fingerprint", "code_version"}
    assert expected | {"input_snapshot", "scored_at", "truncated", "source_key"} <= set(table.schema.names)
    snapshot = catalog.load_table("shardwise.res").current_snapshot()
    assert snapshot is not None and snapshot.summary is not None
    assert (snapshot.summary["shardwise.shard"], snapshot.summary["shardwise.chunk"]) == ("run-a:0", "0")


def test_a_table_of_that_name_in_another_warehouse_is_refused(tmp_path) -> None:
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    IcebergSink(str(tmp_path / "one"), "res", LAYOUT, catalog=catalog).ensure()
    with pytest.raises(ConfigError, match="another warehouse"):
        IcebergSink(str(tmp_path / "two"), "res", LAYOUT, catalog=catalog).ensure()


def test_ensure_turns_off_pyicebergs_own_commit_retries_that_would_skip_the_check(tmp_path) -> None:
    sink = IcebergSink(str(tmp_path), "res", LAYOUT)
    sink.ensure()
    with sink._table().transaction() as transaction:
        transaction.set_properties({"commit.retry.num-retries": "4"})
    with pytest.raises(ConfigError, match=r"commit.retry.num-retries above 0 .*set it to 0"):
        sink.commit(chunk(0))
    sink.ensure()
    assert sink._table().metadata.properties["commit.retry.num-retries"] == "0"
    assert sink.commit(chunk(0)).status == "written"


def test_committing_before_ensure_says_what_to_do(tmp_path) -> None:
    with pytest.raises(ConfigError, match="call ensure"):
        IcebergSink(str(tmp_path), "res", LAYOUT).commit(chunk(0))


@pytest.mark.s3
def test_a_missing_bucket_is_one_line_naming_it_and_is_not_retried(
    moto_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_url)
    for name, value in {
        "AWS_ACCESS_KEY_ID": "t",
        "AWS_SECRET_ACCESS_KEY": "t",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(name, value)
    sink = IcebergSink(
        "s3://sw-no-such-bucket/lake",
        "res",
        LAYOUT,
        catalog=f"sqlite:///{tmp_path / 'catalog.db'}",
        retry=RetryPolicy(deadline_s=600),
    )
    with pytest.raises(ConfigError, match="results bucket 'sw-no-such-bucket' does not exist"):
        sink.ensure()


def _dest(location: str, table: str = "shardwise_results") -> Destination:
    return Destination(given=location, location=location, table=table)


def test_the_kind_is_registered_with_its_option_and_target(tmp_path) -> None:
    assert sink_kind("iceberg") is KIND
    assert (KIND.extra, KIND.schemes) == ("iceberg", ())
    assert flag_name("iceberg_catalog", None) == "--iceberg-catalog"
    assert IcebergOptions().iceberg_catalog is None
    KIND.require()
    assert KIND.target(_dest("/data/wh", "analytics.docs")) == "iceberg:/data/wh/analytics.docs"
    KIND.check(_dest(str(tmp_path)), IcebergOptions())
    KIND.check(_dest("s3://b/wh"), IcebergOptions(iceberg_catalog="postgresql://u@h/db"))


@pytest.mark.parametrize(
    ("table", "catalog", "location", "refusal"),
    [
        ("a.b.c", None, "{tmp}", "not namespace.table of plain identifiers"),
        ("bad-name", None, "{tmp}", "not namespace.table of plain identifiers"),
        ("docs", None, "s3://b/wh", "give --iceberg-catalog"),
        ("docs", "mysql://u@h/db", "{tmp}", "uses driver 'mysql'"),
        ("docs", "sqlite://", "{tmp}", "in memory"),
        ("docs", "not a url", "{tmp}", "not a SQLAlchemy URL"),
    ],
)
def test_the_kind_refuses_bad_tables_and_catalogs_in_one_line(
    tmp_path, table: str, catalog: str | None, location: str, refusal: str
) -> None:
    dest = _dest(location.format(tmp=tmp_path), table)
    with pytest.raises(ConfigError, match=refusal) as caught:
        KIND.check(dest, IcebergOptions(iceberg_catalog=catalog))
    assert "\n" not in str(caught.value) and "secret" not in str(caught.value)


@pytest.mark.parametrize("key_type", ["int", "text"])
def test_the_sink_opened_through_the_kind_stores_either_key_type(tmp_path, key_type: KeyType) -> None:
    from shardwise.sinks.base import Layout

    layout = Layout(LAYOUT.outputs, key_type)
    sink = KIND.open(_dest(str(tmp_path), "ns.res"), layout, IcebergOptions(), RetryPolicy())
    sink.ensure()
    keys: list[Any] = [1, 2] if key_type == "int" else ["a", "b"]
    rows = [ResultRow(k, row(i).values, "fp") for i, k in enumerate(keys)]
    assert sink.commit(SinkChunk("run-a", 0, 0, rows, lineage(), {"rows": 2, "key": keys[-1]})).inserted == 2
    assert sink.seal("run-a", 0, 1) == SinkCommit("sealed", {})
    assert sink.committed("run-a", 0, 1) == SinkCommit("sealed", {})
    assert sink.stored_key_type() == key_type
    assert [r["source_key"] for r in sink.read()] == keys
    sink.close()


def test_a_catalog_url_with_a_password_is_refused_without_showing_it() -> None:

    with pytest.raises(ConfigError) as err:
        flat_spec(
            source="sqlite:///x.db", results="/tmp/wh", results_table="t", results_format="iceberg",
            results_options={"iceberg_catalog": "postgresql+psycopg://app:s3cr3t@db/cat"},
        )  # fmt: skip
    assert "holds a password" in str(err.value) and "PGPASSWORD" in str(err.value)
    assert "s3cr3t" not in str(err.value), "a refused value is never echoed"
