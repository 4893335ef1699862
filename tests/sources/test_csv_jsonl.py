"""CSV and JSON Lines files as a source: a local folder, a glob and an S3 prefix (moto's server), bad rows
(a repeated key: dead letters; no readable key: counted skips), deterministic shards, only-new by the
files' ETags, and real ``shardwise run``s into SQLite results."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flow_data import execute

from shardwise.errors import ConfigError, SourceError
from shardwise.flows.cli import main
from shardwise.sources import open_source, plan_objects
from shardwise.sources.base import NewOnly
from shardwise.sources.csv_jsonl import CsvJsonlSource


def _csv(ids: range) -> str:
    return "id,text\n" + "".join(f'{i},"paragraph, number {i}"\n' for i in ids)


def _jsonl(ids: range) -> str:
    return "".join(json.dumps({"id": i, "text": f"paragraph number {i}", "extra": [i]}) + "\n" for i in ids)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """30 rows: ``a.csv`` (0-9), ``sub/b.jsonl`` (10-19), ``c.ndjson`` (20-29), and a file that is ignored."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "a.csv").write_text(_csv(range(10)))
    (data / "sub" / "b.jsonl").write_text(_jsonl(range(10, 20)))
    (data / "c.ndjson").write_text(_jsonl(range(20, 30)))
    (data / "_SUCCESS").write_text("")
    return data


def _read_all(source: Any, plan: Any) -> list[tuple[Any, Any]]:
    return [(row.key, row.value) for shard in plan.shards for row in source.read(plan, shard)]


def test_a_folder_plans_every_row_once_in_a_fixed_order(folder: Path) -> None:
    with open_source(str(folder)) as source:
        assert isinstance(source, CsvJsonlSource) and source.kind == "csv"
        source.check()
        plan = source.plan(shards=3)
        assert plan.kind == "csv" and plan.by_objects and len(plan.shards) == 3
        assert plan.params["key_type"] == "int" and plan.params["ignored_objects"] == 1
        rows = _read_all(source, plan)
        assert source.plan(shards=3).to_json() == plan.to_json()  # the same snapshot, the same shards
        assert _read_all(source, plan) == rows
    assert sorted(key for key, _ in rows) == list(range(30))
    assert dict(rows)[3] == "paragraph, number 3" and dict(rows)[13] == "paragraph number 13"
    assert sorted(plan_objects(plan)) == plan_objects(plan) and len(plan_objects(plan)) == 3


def test_blocks_cut_a_file_into_shards_and_a_resumed_read_skips_its_rows(folder: Path) -> None:
    with CsvJsonlSource(str(folder), block_rows=4) as source:
        plan = source.plan(rows_per_shard=4)
        assert [s.expected_rows for s in plan.shards] == [4, 4, 2, 4, 4, 2, 4, 4, 2]
        every = _read_all(source, plan)
        shard = plan.shards[1]
        with source.open_reader(plan, shard) as reader:
            whole = list(reader.rows)
        from shardwise.sources.base import ReadFrom

        with source.open_reader(plan, shard, ReadFrom(rows=3)) as reader:
            assert list(reader.rows) == whole[3:]
    assert sorted(k for k, _ in every) == list(range(30))


def test_a_glob_reads_the_files_it_matches(folder: Path) -> None:
    with open_source(str(folder / "*.csv")) as source:
        plan = source.plan()
        assert sorted(k for k, _ in _read_all(source, plan)) == list(range(10))


def test_input_columns_come_with_the_text(tmp_path: Path) -> None:
    (tmp_path / "q.csv").write_text("qid,question,answer\n7,why?,because\n")
    with open_source(
        str(tmp_path), key="qid", text_column="question", input_columns={"answer": "pair"}
    ) as src:
        ((key, value),) = _read_all(src, src.plan())
    assert key == 7 and tuple(value) == ("why?", "because") and value.names == ("question", "answer")


def test_bad_rows_are_dead_letters_or_counted_skips(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "a.csv").write_text("id,text\n1,one\n2,two,extra\n,no key\n3,three\n5,five\n")
    (tmp_path / "b.jsonl").write_text('{"id": 4, "text": "four"}\n{not json\n\n{"id": 5, "text": "again"}\n')
    with open_source(str(tmp_path)) as source:
        plan = source.plan()
        rows = _read_all(source, plan)
    # A repeated key: each of its rows is a dead letter under that key, saying where it is.
    assert plan.params["duplicate_keys"] == [5] and plan.expected_rows == len(rows) == 5
    assert [(k, v) for k, v in rows if isinstance(v, str)] == [(1, "one"), (3, "three"), (4, "four")]
    repeated = [str(v) for k, v in rows if isinstance(v, Exception)]
    assert [k for k, v in rows if isinstance(v, Exception)] == [5, 5]
    assert repeated[0].startswith("key 5 of a.csv row 4 is on more than one row of the files")
    assert repeated[1].startswith("key 5 of b.jsonl line 4 is on more than one row")
    # No readable key (a line that does not parse, a key left empty): counted apart, named, skipped.
    assert plan.params["null_keys"] == 1 and plan.params["null_key_objects"] == ["a.csv"]
    assert plan.params["unparsable_lines"] == 2
    unreadable = plan.params["unreadable_rows"]
    assert unreadable[0].startswith("a.csv row 2 has no key 'id' (missing, null or empty)")
    assert unreadable[1].startswith("a.csv line 3 is not valid CSV (3 fields where the header has 2)")
    assert unreadable[2].startswith("b.jsonl line 2 is not valid JSON Lines (JSON parse error")
    assert "3 rows of " in caplog.text and "(1 without a key, 2 unparsable lines)" in caplog.text


def test_a_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.csv").write_bytes(b"id,text\n1,caf\xe9\n")
    with open_source(str(tmp_path)) as source, pytest.raises(SourceError) as caught:
        source.check()
    assert str(caught.value).startswith("CSV file 'a.csv' cannot be read: ") and "\n" not in str(caught.value)
    (tmp_path / "a.csv").write_text("id,body\n1,x\n")
    with open_source(str(tmp_path)) as source, pytest.raises(ConfigError, match="its columns are: id, body"):
        source.check()


def test_every_csv_value_stays_as_written_and_a_key_is_an_integer_only_when_every_one_is_canonical(
    tmp_path: Path,
) -> None:
    """Issue 45, item 16: pyarrow's type inference made texts NULL and keys collide."""
    texts = ["NA", "null", "nan", "N/A", "1.50", "-0", "true"]
    (tmp_path / "a.csv").write_text("id,text\n" + "".join(f"{i},{t}\n" for i, t in enumerate(texts)) + "9,\n")
    with open_source(str(tmp_path)) as source:
        plan = source.plan()
        rows = dict(_read_all(source, plan))
    assert plan.params["key_type"] == "int" and plan.params["null_keys"] == 0
    assert rows == {**dict(enumerate(texts)), 9: None}, "only an empty field is NULL"

    keys = ["NA", "null", "01", "1", "12345678901234567890", "12345678901234567891", "1.50", "1.5"]
    (tmp_path / "a.csv").write_text("id,text\n" + "".join(f"{k},row {k}\n" for k in keys))
    with open_source(str(tmp_path)) as source:
        plan = source.plan()
        rows = dict(_read_all(source, plan))
    assert plan.params["key_type"] == "text" and plan.params["duplicate_keys"] == []
    assert plan.params["null_keys"] == 0 and rows == {k: f"row {k}" for k in keys}

    (tmp_path / "a.csv").write_text("id,text\n-3,a\n0,b\n9223372036854775807,c\n")
    with open_source(str(tmp_path)) as source:
        plan = source.plan()
        assert plan.params["key_type"] == "int"
        assert sorted(k for k, _ in _read_all(source, plan)) == [-3, 0, 9223372036854775807]


def test_a_quote_left_open_refuses_the_file_naming_its_line(tmp_path: Path) -> None:
    """Issue 45, item 15: the value swallowed the rest of the file, and pyarrow said nothing."""
    lines = ["1,one", "2,two", '3,"three unclosed', *(f"{i},n{i}" for i in range(4, 11))]
    (tmp_path / "a.csv").write_text("id,text\n" + "\n".join(lines) + "\n")
    with open_source(str(tmp_path)) as source, pytest.raises(SourceError) as caught:
        source.check()
    said = str(caught.value)
    assert said.startswith(
        "CSV file 'a.csv' cannot be read: the quoted value starting on line 4 is never closed"
    )
    assert "\n" not in said and said.endswith(
        'close its quote (a quote inside a quoted value is written twice: "")'
    )
    (tmp_path / "a.csv").write_text('id,text\n1,one\n"2,two\n3,three\n')  # open in the key column
    with (
        open_source(str(tmp_path)) as source,
        pytest.raises(SourceError, match="starting on line 3 is never"),
    ):
        source.check()
    rows = "".join(f"{i},row {i}\n" for i in range(20_000))  # the header's value outgrows csv's field limit
    (tmp_path / "a.csv").write_text(f'id,"text\n{rows}')
    with (
        open_source(str(tmp_path)) as source,
        pytest.raises(SourceError, match="starting on line 1 is never"),
    ):
        source.check()


def test_a_quoted_value_of_many_lines_is_read_and_warned_about_with_its_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from shardwise.sources.csv_jsonl.quotes import MAX_VALUE_LINES

    long = "\n".join(f"line {i}" for i in range(MAX_VALUE_LINES + 20))
    short = "one\ntwo"
    (tmp_path / "a.csv").write_text(f'id,text\n1,"{short}"\n2,"a ""quoted"" {long}"\n3,three\n')
    with open_source(str(tmp_path)) as source:
        plan = source.plan()
        rows = dict(_read_all(source, plan))
    assert rows == {1: short, 2: f'a "quoted" {long}', 3: "three"}
    warned = [r.getMessage() for r in caplog.records if "spans" in r.getMessage()]
    assert warned == [
        f"CSV file 'a.csv': the quoted value starting on line 4 spans {MAX_VALUE_LINES + 20} lines (more "
        f"than {MAX_VALUE_LINES}); if a quote is missing there, the rows it swallowed are not scored: check "
        "the quotes from that line"
    ]


@pytest.mark.parametrize(
    ("name", "data", "said"),
    [
        (
            "a.jsonl",
            b'{"id": 1, "text": "ok"}\n{"id": 2, "text": "caf\xe9"}\n',
            "line 2 holds byte 0xe9, which is not UTF-8",
        ),
        (
            "a.csv",
            "id,text\n1,caf\u00e9\n".encode("utf-16"),
            "it is UTF-16 (it starts with UTF-16's byte-order mark)",
        ),
        ("a.csv", "id,text\n1,x\n".encode("utf-16-le"), "line 1 holds a NUL byte"),
        ("a.csv", b"id,text\n1,caf\xe9\n", "line 2 holds byte 0xe9, which is not UTF-8"),
    ],
    ids=["latin-1 JSON Lines", "UTF-16 CSV", "UTF-16 CSV without its mark", "latin-1 CSV"],
)
def test_a_file_that_is_not_utf8_is_one_line_naming_its_line(
    tmp_path: Path, name: str, data: bytes, said: str
) -> None:
    """Issue 45, item 17: these were a UnicodeDecodeError's traceback."""
    (tmp_path / name).write_bytes(data)
    with open_source(str(tmp_path)) as source, pytest.raises(SourceError) as caught:
        source.check()
    label = "CSV" if name.endswith(".csv") else "JSON Lines"
    assert str(caught.value).startswith(f"{label} file {name!r} cannot be read: {said}"), caught.value
    assert str(caught.value).endswith("; save it as UTF-8") and "\n" not in str(caught.value)


def test_a_line_of_two_json_objects_or_too_long_is_skipped_saying_what_it_is(tmp_path: Path) -> None:
    from shardwise.sources.csv_jsonl.unreadable import MAX_ROW_BYTES

    long = json.dumps({"id": 4, "text": "x" * MAX_ROW_BYTES})
    (tmp_path / "a.jsonl").write_text(
        '{"id": 1, "text": "one"} {"id": 2, "text": "two"}\n{"id": 3, "text": "three"}\n'
        f'{long}\n{{"id": 5, "text": "five"}}\n'
    )
    with open_source(str(tmp_path)) as source:
        plan = source.plan()
        rows = dict(_read_all(source, plan))
    assert rows == {3: "three", 5: "five"}
    assert plan.params["unparsable_lines"] == 2 and plan.params["null_keys"] == 0
    first, second = plan.params["unreadable_rows"]
    assert first.startswith(
        "a.jsonl line 1 is not valid JSON Lines (it holds 2 JSON objects, where a line holds one)"
    )
    assert second.startswith(
        f"a.jsonl line 3 is not valid JSON Lines (it is {len(long):,} bytes long, more than the 16 MiB"
    )


def test_a_csv_row_too_long_refuses_the_file_saying_what_it_is(tmp_path: Path) -> None:
    from shardwise.sources.csv_jsonl.unreadable import MAX_ROW_BYTES

    for size, said in ((MAX_ROW_BYTES + 1, "the values of row 2 hold"), (3 * MAX_ROW_BYTES, "line 3 is")):
        (tmp_path / "a.csv").write_text(f"id,text\n1,one\n2,{'x' * size}\n3,three\n")
        with open_source(str(tmp_path)) as source, pytest.raises(SourceError) as caught:
            source.check()
        assert str(caught.value).startswith(f"CSV file 'a.csv' cannot be read: {said} "), caught.value
        assert "more than the 16 MiB a row may hold; split or shorten its values" in str(caught.value)
    (tmp_path / "a.csv").write_text(f"id,text\n1,{'x' * (3 << 20)}\n")  # more than pyarrow's 1 MiB blocks
    with open_source(str(tmp_path)) as source:
        assert [len(v) for _, v in _read_all(source, source.plan())] == [3 << 20]


def test_parquet_options_only(folder: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"where 'id > 3' applies to sql sources, .* is read as a csv source"
    ):
        open_source(str(folder), kind_options={"sql": {"where": "id > 3"}})
    with pytest.raises(ConfigError, match="a CSV or JSON Lines source is read whole: drop --table"):
        open_source(str(folder), table="docs")
    with pytest.raises(ConfigError, match="drop --image-column"):
        open_source(str(folder), image_column="img")
    (folder / "only.txt").unlink(missing_ok=True)
    empty = folder / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match="no CSV or JSON Lines files at"), CsvJsonlSource(str(empty)) as s:
        s.check()


def test_files_of_two_formats_of_two_kinds_are_refused(folder: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": [99], "text": ["x"]}), folder / "d.parquet")
    with pytest.raises(ConfigError, match=r"holds 3 csv files \(.csv .jsonl .ndjson\), 1 parquet files"):
        open_source(str(folder))


@pytest.mark.s3
def test_an_s3_prefix_plans_reads_and_skips_seen_objects(client: Any, bucket: str) -> None:
    client.put_object(Bucket=bucket, Key="in/a.csv", Body=_csv(range(5)).encode())
    client.put_object(Bucket=bucket, Key="in/b.jsonl", Body=_jsonl(range(5, 9)).encode())
    client.put_object(Bucket=bucket, Key="in/notes.txt", Body=b"ignored")
    with open_source(f"s3://{bucket}/in/", s3_client=client) as source:
        assert isinstance(source, CsvJsonlSource)
        plan = source.plan(shards=2)
        assert sorted(k for k, _ in _read_all(source, plan)) == list(range(9))
        seen = frozenset(plan_objects(plan))
        assert source.plan(new_only=NewOnly("v1", "emb", seen)).shards == ()
        client.put_object(Bucket=bucket, Key="in/b.jsonl", Body=_jsonl(range(5, 10)).encode())  # a re-upload
        again = source.plan(new_only=NewOnly("v1", "emb", seen))
        assert sorted(k for k, _ in _read_all(source, again)) == list(range(5, 10))


@pytest.mark.usefixtures("prefect_harness")
def test_a_run_from_csv_into_sqlite_scores_the_valid_rows_and_only_new_adds_nothing(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (folder / "bad.csv").write_text("id,text\n40,fine\n41,a,b\n,no key\n9,a second 9\n")
    results = f"sqlite:///{tmp_path / 'results.db'}"
    run = ["run", "--source", str(folder), "--model", "tiny", "--results", results, "--results-table", "emb"]
    assert main([*run, "--shards", "3"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "2 skipped (1 with a NULL key, 1 unparsable)" in out, out
    assert execute(results, "select count(*), count(distinct source_key) from emb") == [(30, 30)]
    letters = execute(results, "select source_key, message from shardwise_errors order by message")
    assert [key for key, _ in letters] == ["9", "9"]
    assert letters[0][1].startswith("key 9 of a.csv row 10 is on more than one row")

    assert main([*run, "--only-new"]) == 0, capsys.readouterr().err
    assert "0 rows scored" in capsys.readouterr().out
    assert execute(results, "select count(*) from emb") == [(30,)]

    (folder / "later.jsonl").write_text(_jsonl(range(50, 53)))
    assert main([*run, "--only-new"]) == 0, capsys.readouterr().err
    assert "3 rows scored" in capsys.readouterr().out
    assert execute(results, "select count(*) from emb") == [(33,)]


@pytest.mark.postgres
@pytest.mark.usefixtures("prefect_harness")
def test_rows_of_a_repeated_key_are_dead_letters_in_postgresql_results_too(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a.csv").write_text("id,text\n1,one\n2,two\n2,again\n3,three\n")
    run = ["run", "--source", str(tmp_path), "--model", "tiny", "--results", pg_url, "--results-table", "emb"]
    assert main(run) == 0, capsys.readouterr().err
    assert execute(pg_url, "select source_key from emb order by source_key") == [(1,), (3,)]
    assert execute(pg_url, "select source_key from shardwise_errors") == [("2",), ("2",)]


def test_a_watcher_announces_new_csv_and_jsonl_files(folder: Path) -> None:
    from shardwise.watch import ObjectWatcher, WatchSpec

    payloads: list[dict[str, Any]] = []

    def emit(*, event: str, resource: dict[str, str], payload: dict[str, Any]) -> None:
        payloads.append(payload)

    with ObjectWatcher(WatchSpec(str(folder), "landing"), emit) as watcher:
        assert watcher.poll_once() == 1 and payloads[-1]["count"] == 3  # a.csv, sub/b.jsonl, c.ndjson
        assert watcher.poll_once() == 0
        (folder / "d.jsonl").write_text(_jsonl(range(40, 42)))
        assert watcher.poll_once() == 1
        assert [o["key"] for o in payloads[-1]["objects"]] == [str(folder / "d.jsonl")]
