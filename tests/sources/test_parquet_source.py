"""ParquetSource on local files: plans are exact, disjoint and covering; reads check what they read."""

from __future__ import annotations

import json
import os
import random
import tempfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import ConfigError, SourceError
from shardwise.sources import plan_objects
from shardwise.sources.base import NewOnly, Source, SourcePlan
from shardwise.sources.parquet.source import ParquetSource

_WORDS = ["shard", "batch", "model", "token", "table", "vector", "merge", "river", "stone", "lamp", "orbit"]


def sentence(i: int) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 12))) + f" ({i})"


def write(path: Path, keys: list[int | None], *, row_group_size: int = 100, **columns: pa.Array) -> Path:
    """A Parquet file with an ``id`` column, a ``text`` column (generated unless given) and any extras."""
    table = {"id": pa.array(keys, pa.int64()), "text": [sentence(k or 0) for k in keys], **columns}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(table), path, row_group_size=row_group_size)
    return path


def read_all(source: ParquetSource, plan: SourcePlan) -> list[int | str]:
    return [row.key for shard in plan.shards for row in source.read(plan, shard)]


def dataset(root: Path, files: int = 10, rows: int = 1000, row_group_size: int = 100) -> list[int]:
    for f in range(files):
        write(
            root / f"part-{f:03d}.parquet",
            list(range(f * rows, (f + 1) * rows)),
            row_group_size=row_group_size,
        )
    return list(range(files * rows))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 120), min_size=1, max_size=5),
    row_group_size=st.integers(1, 40),
    sizing=st.one_of(
        st.tuples(st.just("shards"), st.integers(1, 12)),
        st.tuples(st.just("rows_per_shard"), st.integers(1, 150)),
    ),
)
def test_plans_are_disjoint_and_covering(
    sizes: list[int], row_group_size: int, sizing: tuple[str, int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        keys: list[int] = []
        for f, size in enumerate(sizes):
            part = list(range(1000 * f, 1000 * f + size))
            write(Path(tmp) / f"f{f}.parquet", part, row_group_size=row_group_size)
            keys += part
        source = ParquetSource(tmp)
        plan = source.plan(**{sizing[0]: sizing[1]})
        read: list[int | str] = []
        for shard in plan.shards:
            rows = [row.key for row in source.read(plan, shard)]
            assert len(rows) == shard.expected_rows
            read += rows
        assert Counter(read) == Counter(keys)
        assert plan.expected_rows == len(keys)
        units = [
            (s["path"], i) for sh in plan.shards for s in sh.bounds["spans"] for i in range(*s["row_groups"])
        ]
        assert len(units) == len(set(units)) == plan.params["row_groups"]
        if sizing[0] == "shards":
            assert len(plan.shards) == min(sizing[1], plan.params["row_groups"])
        else:
            assert all(s.expected_rows <= sizing[1] or len(_units(s)) == 1 for s in plan.shards)


def _units(shard) -> list[tuple[str, int]]:
    return [(s["path"], i) for s in shard.bounds["spans"] for i in range(*s["row_groups"])]


def test_shards_n_is_exact_and_balanced(tmp_path: Path) -> None:
    dataset(tmp_path)
    plan = ParquetSource(str(tmp_path)).plan(shards=7)
    assert len(plan.shards) == 7
    assert all(abs(s.expected_rows - 10_000 / 7) <= 100 for s in plan.shards)
    assert plan.expected_rows == 10_000
    assert [s.shard_id for s in plan.shards] == list(range(7))


def test_more_shards_than_row_groups_gives_one_shard_per_row_group(tmp_path: Path) -> None:
    dataset(tmp_path, files=2, rows=300)
    plan = ParquetSource(str(tmp_path)).plan(shards=50)
    assert len(plan.shards) == 6
    assert all(len(_units(s)) == 1 for s in plan.shards)


def test_rows_per_shard_groups_row_groups_greedily(tmp_path: Path) -> None:
    dataset(tmp_path, files=3, rows=1000)
    plan = ParquetSource(str(tmp_path)).plan(rows_per_shard=250)
    assert [s.expected_rows for s in plan.shards] == [200] * 15


def test_small_files_share_a_shard_with_several_spans(tmp_path: Path) -> None:
    dataset(tmp_path, files=6, rows=150)
    plan = ParquetSource(str(tmp_path)).plan(rows_per_shard=450)
    assert [s.expected_rows for s in plan.shards] == [450, 450]
    first = plan.shards[0].bounds["spans"]
    assert [(Path(s["path"]).name, s["row_groups"]) for s in first] == [
        ("part-000.parquet", [0, 2]),
        ("part-001.parquet", [0, 2]),
        ("part-002.parquet", [0, 2]),
    ]
    assert {"etag", "size"} <= set(first[0])


def test_default_is_ten_thousand_rows_per_shard(tmp_path: Path) -> None:
    dataset(tmp_path, files=3, rows=5000, row_group_size=1000)
    plan = ParquetSource(str(tmp_path)).plan()
    assert [s.expected_rows for s in plan.shards] == [10_000, 5000]
    assert plan.params["rows_per_shard"] == 10_000 and plan.params["shards"] is None


@pytest.mark.parametrize(
    "kwargs", [{"shards": 2, "rows_per_shard": 10}, {"shards": 0}, {"rows_per_shard": -1}, {"shards": True}]
)
def test_bad_sizing_is_a_config_error(tmp_path: Path, kwargs: dict[str, int]) -> None:
    dataset(tmp_path, files=1, rows=10)
    with pytest.raises(ConfigError, match="shard"):
        ParquetSource(str(tmp_path)).plan(**kwargs)


def test_plan_is_deterministic_and_round_trips_through_json(tmp_path: Path) -> None:
    keys = dataset(tmp_path, files=4, rows=250)
    source = ParquetSource(str(tmp_path))
    plan = source.plan(shards=3)
    assert plan.to_json() == source.plan(shards=3).to_json()
    stored = SourcePlan.from_json(plan.to_json())
    assert sorted(read_all(ParquetSource(str(tmp_path)), stored)) == keys
    assert len(plan.snapshot or "") == 64 and plan.kind == "parquet"
    json.dumps(plan.params)


def test_a_source_satisfies_the_protocol_and_reads_from_many_threads(tmp_path: Path) -> None:
    keys = dataset(tmp_path, files=5, rows=400)
    source: Source = ParquetSource(str(tmp_path))
    plan = source.plan(shards=9)
    with ThreadPoolExecutor(max_workers=8) as pool:
        parts = list(pool.map(lambda shard: [r.key for r in source.read(plan, shard)], plan.shards * 3))
    assert sorted(k for part in parts for k in part) == sorted(keys * 3)
    source.close()


def test_locations_folder_glob_file_and_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "a.parquet", [1, 2])
    write(tmp_path / "nested" / "deeper" / "b.parquet", [3])
    write(tmp_path / "other.pq", [4])
    (tmp_path / "_SUCCESS").write_text("")
    folder = ParquetSource(str(tmp_path)).plan()
    assert sorted(read_all(ParquetSource(str(tmp_path)), folder)) == [1, 2, 3]
    assert folder.params["ignored_objects"] == 2
    globbed = ParquetSource(f"{tmp_path}/*.parquet")
    assert sorted(read_all(globbed, globbed.plan())) == [1, 2]
    assert globbed.identity == f"{tmp_path}/*.parquet"
    recursive = ParquetSource(f"{tmp_path}/**/*.parquet")
    assert sorted(read_all(recursive, recursive.plan())) == [1, 2, 3]
    single = ParquetSource(str(tmp_path / "other.pq"))
    assert read_all(single, single.plan()) == [4]
    monkeypatch.chdir(tmp_path)
    relative = ParquetSource("nested/")
    assert relative.identity == str(tmp_path / "nested")
    assert relative.plan().params["location"] == str(tmp_path / "nested")


def test_missing_column_lists_the_columns(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [1, 2], body=pa.array(["x", "y"]))
    with pytest.raises(SourceError, match=r"column 'body_text' not in .*columns are: id, text, body"):
        ParquetSource(str(tmp_path), text_column="body_text").plan()
    with pytest.raises(SourceError, match=r"key column 'doc_id' .*pass the right name as key="):
        ParquetSource(str(tmp_path), key="doc_id").plan()


def test_a_float_key_column_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [1], score=pa.array([0.5]))
    with pytest.raises(SourceError, match="key must be an integer or string"):
        ParquetSource(str(tmp_path), key="score").plan()


def test_no_parquet_files_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("id,text\n1,hello\n")
    with pytest.raises(SourceError, match=r"no Parquet objects at .*1 other objects ignored.*wrong folder"):
        ParquetSource(str(tmp_path)).plan()
    with pytest.raises(SourceError, match="no Parquet objects"):
        ParquetSource(str(tmp_path / "*.parquet")).plan()
    with pytest.raises(SourceError, match="not a file, folder or glob that exists"):
        ParquetSource(str(tmp_path / "missing")).plan()


def test_a_broken_file_is_a_source_error(tmp_path: Path) -> None:
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(SourceError, match="not a readable Parquet file"):
        ParquetSource(str(tmp_path)).plan()


@pytest.mark.parametrize("glob", [False, True], ids=["folder", "glob"])
def test_check_reads_every_footer_and_names_a_broken_file_inside_the_location(
    tmp_path: Path, glob: bool
) -> None:
    good = write(tmp_path / "a.parquet", list(range(10)))
    ParquetSource(str(tmp_path)).check()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cut.parquet").write_bytes(good.read_bytes()[:-20])  # its footer cut off
    location = str(tmp_path / "**" / "*.parquet") if glob else str(tmp_path)
    broken = r"^Parquet object 'sub/cut.parquet' is not a readable Parquet file"
    with pytest.raises(SourceError, match=broken) as err:
        ParquetSource(location).check()
    assert str(tmp_path) not in str(err.value), "the location is the user's to name, as they gave it"


def test_bad_locations_and_arguments_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unsupported scheme"):
        ParquetSource("gs://bucket/data/")
    with pytest.raises(ConfigError, match="key must name a column"):
        ParquetSource(str(tmp_path), key="")


def test_a_file_replaced_after_planning_fails_the_read(tmp_path: Path) -> None:
    path = write(tmp_path / "a.parquet", list(range(300)))
    source = ParquetSource(str(tmp_path))
    plan = source.plan(shards=2)
    write(path, list(range(500)))
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    with pytest.raises(SourceError, match=r"changed since it was listed.*start a new run"):
        list(source.read(plan, plan.shards[0]))
    path.unlink()
    with pytest.raises(SourceError, match="no longer exists"):
        list(source.read(plan, plan.shards[1]))


def test_a_plan_from_another_source_is_refused(tmp_path: Path) -> None:
    dataset(tmp_path, files=1, rows=10)
    plan = ParquetSource(str(tmp_path)).plan()
    with pytest.raises(ConfigError, match="does not match this source"):
        list(ParquetSource(str(tmp_path), text_column="body").read(plan, plan.shards[0]))


def test_only_new_skips_seen_objects_and_picks_up_rewritten_ones(tmp_path: Path) -> None:
    dataset(tmp_path, files=3, rows=200)
    source = ParquetSource(str(tmp_path))
    first = source.plan(shards=2)
    seen = frozenset(plan_objects(first))
    assert len(seen) == 3
    new_only = NewOnly("m@1", "results", seen)
    nothing = source.plan(shards=2, new_only=new_only)
    assert nothing.shards == () and nothing.expected_rows == 0
    assert (nothing.params["skipped_objects"], nothing.params["skipped_rows"]) == (3, 600)
    assert nothing.params["new_only"] == {
        "model_version": "m@1",
        "results_table": "results",
        "seen_objects": 3,
    }
    rewritten = write(tmp_path / "part-001.parquet", list(range(5000, 5250)))
    os.utime(rewritten, ns=(0, rewritten.stat().st_mtime_ns + 1_000_000))
    write(tmp_path / "part-009.parquet", [9000, 9001])
    again = source.plan(shards=2, new_only=new_only)
    assert sorted(read_all(source, again)) == [*range(5000, 5250), 9000, 9001]
    assert (again.params["skipped_objects"], again.params["skipped_rows"]) == (2, 400)
    assert again.snapshot != first.snapshot


def test_null_keys_are_skipped_and_counted(tmp_path: Path) -> None:
    write(tmp_path / "a.parquet", [1, None, 3, None, 5], row_group_size=2)
    source = ParquetSource(str(tmp_path))
    plan = source.plan(shards=1)
    assert plan.params["null_keys"] == 2 and plan.params["null_keys_known"]
    assert plan.expected_rows == 3 and plan.params["rows"] == 5
    rows = source.read(plan, plan.shards[0])
    assert [r.key for r in rows] == [1, 3, 5]
    assert (rows.rows, rows.null_keys) == (3, 2)


def test_null_and_bytes_values_pass_through(tmp_path: Path) -> None:
    blobs = pa.array([b"\xff\xfe not utf-8", None, b"fine"], pa.binary())
    write(tmp_path / "a.parquet", [1, 2, 3], blob=blobs, note=pa.array(["x", None, ""]))
    assert _values(ParquetSource(str(tmp_path), text_column="blob")) == blobs.to_pylist()
    assert _values(ParquetSource(str(tmp_path), text_column="note")) == ["x", None, ""]


def _values(source: ParquetSource) -> list[object]:
    plan = source.plan()
    return [row.value for shard in plan.shards for row in source.read(plan, shard)]


def test_string_keys_are_read_as_str(tmp_path: Path) -> None:
    table = pa.table({"doc": ["b-2", "a-1"], "text": [sentence(1), sentence(2)]})
    pq.write_table(table, tmp_path / "a.parquet")
    source = ParquetSource(str(tmp_path), key="doc")
    plan = source.plan()
    assert [(r.key, r.value) for r in source.read(plan, plan.shards[0])] == [
        ("b-2", sentence(1)),
        ("a-1", sentence(2)),
    ]


def test_more_input_columns_come_as_named_inputs(tmp_path: Path) -> None:
    """A prompt's other columns are read beside the text: each row's value names them, in order."""
    from shardwise.lineage import value_fingerprint
    from shardwise.model.text import Inputs

    write(tmp_path / "a.parquet", [1, 2], title=pa.array(["One", None]))
    source = ParquetSource(str(tmp_path), input_columns={"title": "prompt"})
    plan = source.plan()
    values = [row.value for shard in plan.shards for row in source.read(plan, shard)]
    assert [v.by_name() for v in values] == [
        {"text": sentence(1), "title": "One"},
        {"text": sentence(2), "title": None},
    ]
    assert isinstance(values[0], Inputs) and value_fingerprint(values[1]) is None
    with pytest.raises(SourceError, match=r"input column 'subtitle' not in .*columns are: id, text, title"):
        ParquetSource(str(tmp_path), input_columns={"subtitle": "prompt"}).plan()
    with pytest.raises(ConfigError, match="does not match this source"):
        list(ParquetSource(str(tmp_path)).read(plan, plan.shards[0]))
