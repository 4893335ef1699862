"""A causal LM directory end to end: ``shardwise run --model DIR --prompt ...`` on SQLite and PostgreSQL.

The model is a tiny random Llama (``tests/hf_builders.py``) named by its
path. The results table gets text ``generated_text`` and ``finish_reason`` and
integer token counts, with lineage, equal to the engine's own generation;
``--only-new`` scores nothing the second time, and a new prompt is a new
model version, so it rescores every row, its outputs stored under their own
version beside the first prompt's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from flow_data import BAD_ROWS, LINEAGE, execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise import Engine, EngineConfig
from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.model.generation import GenerationSettings
from shardwise.model.text import Inputs
from shardwise.models.hf.causal.model import HFCausalSpec
from shardwise.pipeline.run_result import RunResult

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 24
TABLE = "generated"
PROMPT = "Summarise: {text}"
COLUMNS = "source_key, generated_text, finish_reason, prompt_tokens, completion_tokens"


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _cli(url: str, lm: Path, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results-table", TABLE,
        "--max-new-tokens", "6", "--chat", "off", "--precision", "fp32", "--shards", "2", *extra,
    ]  # fmt: skip


def _run(url: str, lm: Path, *, only_new: bool = False, **generation: Any) -> RunResult:
    """Generate from ``url``'s docs with ``lm`` into TABLE; ``generation`` adds to its settings."""
    settings = {"max_new_tokens": 6, "chat": "off", "prompt": PROMPT, **generation}
    params = {
        "source": {"location": url, "table": "docs"},
        "model": {"name": str(lm), "generation": settings},
        "results": {"table": TABLE},
        "run": {"precision": "fp32", "shards": 2, "only_new": only_new},
    }
    state = score(ScoreParams.model_validate(params), return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), summary
    return summary


def _expected(lm: Path, rows: list[tuple[int, Any]], prompt: str) -> dict[int, tuple[Any, ...]]:
    settings = GenerationSettings(prompt=prompt, chat="off", max_new_tokens=6)
    model = HFCausalSpec(lm, generation=settings).load(torch.device("cpu"))
    results = Engine(model, EngineConfig(precision="fp32")).run(rows)
    names = COLUMNS.split(", ")[1:]
    return {int(r.key): tuple(r.values[n] for n in names) for r in results if r.values is not None}


def _check(url: str, lm: Path, rows: list[tuple[int, Any]]) -> None:
    """Every good row's four columns equal the engine's own generation; lineage names the model."""
    stored = execute(url, f"select {COLUMNS} from {TABLE} order by source_key")
    assert all(isinstance(n, int) for row in stored for n in row[3:])
    expected = _expected(lm, rows, PROMPT)
    assert {int(k): tuple(rest) for k, *rest in stored} == expected
    assert {reason for _, _, reason, _, _ in stored} <= {"stop", "length"}
    lineage = execute(url, f"select distinct {', '.join(LINEAGE[:2])} from {TABLE}")
    assert lineage == [(f"hf:{lm.resolve()}", HFCausalSpec(lm, generation=_settings()).describe().version)]


def _settings(prompt: str = PROMPT) -> GenerationSettings:
    return GenerationSettings(prompt=prompt, chat="off", max_new_tokens=6)


def _only_new_then_new_prompt(url: str, lm: Path) -> None:
    """``--only-new`` retries only the dead letters; a new prompt rescores every row under a new version."""
    again = _run(url, lm, only_new=True)
    assert (again.totals.rows_in, again.totals.rows_out, again.totals.rows_failed) == (
        len(BAD_ROWS),
        0,
        len(BAD_ROWS),
    )
    other = _run(url, lm, only_new=True, prompt="Title: {text}")
    assert other.totals.rows_out == ROWS
    versions = execute(url, f"select model_version, count(*) from {TABLE} group by model_version")
    assert sorted(n for _, n in versions) == [ROWS, ROWS]  # each prompt's outputs under its own version
    new = HFCausalSpec(lm, generation=_settings("Title: {text}")).describe().version
    assert new in {v for v, _ in versions}


def test_sqlite_cli_run_writes_generated_text_with_lineage(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = make_docs(sqlite_url, ROWS)
    code = main(_cli(sqlite_url, lm, "--prompt", PROMPT))
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"completed: {ROWS} rows scored" in out and f"{len(BAD_ROWS)} dead letters" in out
    _check(sqlite_url, lm, rows[:ROWS])
    _only_new_then_new_prompt(sqlite_url, lm)


@pytest.mark.postgres
def test_postgres_run_writes_text_and_int_columns(pg_url: str, lm: Path) -> None:
    rows = make_docs(pg_url, ROWS)
    first = _run(pg_url, lm)
    assert (first.totals.rows_out, first.totals.rows_failed) == (ROWS, len(BAD_ROWS))
    types = execute(
        pg_url,
        "select column_name, data_type from information_schema.columns where table_name = :t "
        "and column_name in ('generated_text', 'finish_reason', 'prompt_tokens', 'completion_tokens') "
        "order by column_name",
        {"t": TABLE},
    )
    assert types == [
        ("completion_tokens", "bigint"),
        ("finish_reason", "text"),
        ("generated_text", "text"),
        ("prompt_tokens", "bigint"),
    ]
    _check(pg_url, lm, rows[:ROWS])
    _only_new_then_new_prompt(pg_url, lm)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompt", "{title}: {text}"], "prompt column 'title' not in table 'docs'; columns are: id, text"),
        (["--prompt", "{id}: {text}"], "names the key column {id}"),
        (["--prompt", "{text!r}"], "not a bare column name"),
        (["--max-new-tokens", "5000"], "leaves no room for a prompt"),
    ],
)
def test_bad_generation_settings_are_refused_before_anything_runs(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str], extra: list[str], message: str
) -> None:
    make_docs(sqlite_url, 3)
    code = main(_cli(sqlite_url, lm, *extra))
    assert code == 2 and message in capsys.readouterr().err
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []


def test_generation_settings_for_an_encoder_are_refused(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 3)
    code = main(["run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--temperature", "0.5"])
    assert code == 2 and "model 'tiny' takes no generation settings" in capsys.readouterr().err


def test_plan_counts_prompt_and_new_tokens(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    args = _cli(sqlite_url, lm, "--prompt", PROMPT)
    assert main(["plan", *args[1:]]) == 0
    out = capsys.readouterr().out
    assert f"2 shards, {ROWS + len(BAD_ROWS)} rows to score" in out and "prompt tokens: " in out


# Structured output: --json-schema FILE.

SCHEMA = {
    "type": "object",
    "properties": {"label": {"enum": ["good", "bad"]}, "urgent": {"type": "boolean"}},
    "required": ["label", "urgent"],
    "additionalProperties": False,
}


def _schema_file(tmp_path: Path) -> Path:
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(SCHEMA, indent=2))
    return path


def test_sqlite_json_schema_run_stores_parsed_json(
    sqlite_url: str, lm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Constrained decoding: every good row valid, ``parsed`` stored as JSON text equal to the output."""
    make_docs(sqlite_url, ROWS)
    args = _cli(sqlite_url, lm, "--json-schema", str(_schema_file(tmp_path)), "--max-new-tokens", "40")
    code = main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"completed: {ROWS} rows scored" in out
    stored = execute(sqlite_url, f"select generated_text, finish_reason, parsed from {TABLE}")
    assert len(stored) == ROWS
    for text, reason, parsed in stored:
        assert reason == "stop" and json.loads(parsed) == json.loads(text)
        assert set(json.loads(parsed)) == {"label", "urgent"}


@pytest.mark.postgres
def test_postgres_json_schema_run_stores_jsonb_and_dead_letters_invalid_outputs(
    pg_url: str, lm: Path
) -> None:
    """Unconstrained, the tiny model's noise is dead-lettered as OutputError; constrained, jsonb values."""
    make_docs(pg_url, ROWS)
    free = _run(pg_url, lm, json_schema=json.dumps(SCHEMA), unconstrained=True)
    assert (free.totals.rows_out, free.totals.rows_failed) == (0, ROWS + len(BAD_ROWS))
    errors = execute(
        pg_url, "select error_class, message from shardwise_errors where error_class = 'OutputError'"
    )
    assert len(errors) == ROWS
    assert all(message.startswith(("not JSON: ", "schema: ")) for _, message in errors)
    held = _run(pg_url, lm, json_schema=json.dumps(SCHEMA), max_new_tokens=40)
    assert (held.totals.rows_out, held.totals.rows_failed) == (ROWS, len(BAD_ROWS))
    types = execute(
        pg_url,
        "select data_type from information_schema.columns where table_name = :t and column_name = 'parsed'",
        {"t": TABLE},
    )
    assert types == [("jsonb",)]
    labels = execute(pg_url, f"select parsed->>'label', jsonb_typeof(parsed->'urgent') from {TABLE}")
    assert (
        len(labels) == ROWS
        and {t for _, t in labels} == {"boolean"}
        and {lb for lb, _ in labels} <= {"good", "bad"}
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not JSON"),
        ('{"type": "objet"}', "json_schema is not a valid JSON Schema: $.type"),
        ("[1]", "must be a JSON object (or true/false); got a list: give a schema such as"),
    ],
)
def test_a_bad_schema_file_is_refused_before_anything_runs(
    sqlite_url: str, lm: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    make_docs(sqlite_url, 3)
    path = tmp_path / "schema.json"
    path.write_text(content)
    try:
        code = main(_cli(sqlite_url, lm, "--json-schema", str(path)))
    except SystemExit as exc:  # argparse refuses a file it cannot read as JSON
        code = exc.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) <= 2, err
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []


def test_unconstrained_without_a_schema_is_refused(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 3)
    assert main(_cli(sqlite_url, lm, "--unconstrained")) == 2
    assert (
        "no json_schema is given; give --json-schema FILE, or drop --unconstrained" in capsys.readouterr().err
    )


# Prompts that name more columns than the text.


def _titled_docs(url: str, rows: int) -> None:
    """``docs`` plus a ``title`` column: a title per row, NULL for the last good row."""
    make_docs(url, rows)
    execute(url, "alter table docs add column title text")
    execute(url, "update docs set title = 'Title ' || id where id < :n", {"n": rows - 1})


@pytest.mark.parametrize("db", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_prompt_reads_every_column_it_names(
    db: str, request: pytest.FixtureRequest, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each row's prompt is filled by column name; a NULL title is a dead letter naming the column; a
    changed title alone makes ``--only-new`` generate that row again (the database computes the
    fingerprint of every column read, as the pipeline stores it)."""
    sqlite_url = request.getfixturevalue("sqlite_url" if db == "sqlite" else "pg_url")
    _titled_docs(sqlite_url, ROWS)
    prompt = "Title: {title}\n\n{text}"
    assert main(_cli(sqlite_url, lm, "--prompt", prompt)) == 0, capsys.readouterr().out
    stored = dict(execute(sqlite_url, f"select source_key, generated_text from {TABLE}"))
    assert len(stored) == ROWS - 1
    (message,) = execute(
        sqlite_url, "select message from shardwise_errors where source_key = :k", {"k": str(ROWS - 1)}
    )
    assert message[0].startswith("column 'title' is null")
    model = HFCausalSpec(lm, generation=_settings(prompt)).load(torch.device("cpu"))
    rows = execute(sqlite_url, "select id, text, title from docs where id < :n order by id", {"n": 4})
    values = [(k, Inputs(("text", "title"), (text, title))) for k, text, title in rows]
    expected = {
        r.key: r.values["generated_text"] for r in Engine(model, EngineConfig(precision="fp32")).run(values)
    }
    assert {k: stored[k] for k in expected} == expected
    assert model.render(values[0][1]).startswith("Title: Title 0\n\n")

    execute(sqlite_url, "update docs set title = 'Another title' where id = 3")
    assert main(_cli(sqlite_url, lm, "--prompt", prompt, "--only-new")) == 0
    out = capsys.readouterr().out
    rescored = execute(sqlite_url, f"select count(*) from {TABLE}")
    assert rescored == [(ROWS - 1,)] and "completed: 1 row scored" in out, out
