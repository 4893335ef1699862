"""``--json-schema FILE`` (issue 34, items 2 and 3): the file is read safely, and the schema reaches the flow
as text, so Prefect never takes a ``$ref`` in it for a block reference.

Item 2: a FIFO, ``/dev/zero``, a directory, a file over 1 MiB and a schema
nested 5,000 deep are each refused in one line, exit 2, before anything runs
(a FIFO blocked the command for ever, ``/dev/zero`` grew it to 21.7 GB, the
deep schema printed a 59-line ``RecursionError``).

Item 3: a local ``"$ref": "#/$defs/label"`` failed the run with "Failed to
resolve block references in parameters"; it now generates, held to the
schema by xgrammar and validated by jsonschema. A ``{"$ref":
{"block_document_id": ...}}`` naming a real Secret block is refused where it
stands for a schema, and is plain JSON elsewhere: the block's value appears
nowhere.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import flow_runs, one_line
from flow_data import execute, make_docs
from hf_builders import tiny_causal_lm
from pydantic import ValidationError

from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 12
TABLE = "labelled"
REF_SCHEMA = {
    "$defs": {"label": {"enum": ["good", "bad"]}, "flag": {"type": "boolean"}},
    "type": "object",
    "properties": {"label": {"$ref": "#/$defs/label"}, "urgent": {"$ref": "#/$defs/flag"}},
    "required": ["label", "urgent"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _args(url: str, lm: Path, schema: Path | str, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", str(lm), "--results-table", TABLE,
        "--max-new-tokens", "40", "--chat", "off", "--precision", "fp32", "--shards", "1",
        "--json-schema", str(schema), *extra,
    ]  # fmt: skip


def _refused(argv: list[str], capfd: pytest.CaptureFixture[str]) -> str:
    """Run the command in this process: exit 2 (argparse's usage error, or the one-line error), one line."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    err = one_line(capfd)
    assert code == 2, err
    return err


# Item 2: what the file may be.


def _write_big(path: Path) -> None:
    path.write_text(json.dumps({"description": "x" * (1 << 20)}))


def _write_deep(path: Path) -> None:
    path.write_text('{"allOf": ' * 5000 + "{}" + "}" * 5000)


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda p: p.mkdir(), "is a directory, not a regular file"),
        (_write_big, "is larger than 1 MiB, the most read for it; give a smaller file"),
        (_write_deep, "nests 5001 levels of objects and arrays, more than the 64 allowed; flatten it"),
        (lambda p: p.write_bytes(b'{"title": "\xff"}'), "is not UTF-8 text"),
    ],
    ids=["directory", "over 1 MiB", "5000 deep", "not UTF-8"],
)
def test_a_schema_file_out_of_bounds_is_one_line_before_anything_runs(
    sqlite_url: str, lm: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str], make: Any, said: str
) -> None:
    make_docs(sqlite_url, 3)
    path = tmp_path / "schema.json"
    make(path)
    before = flow_runs()
    err = _refused(_args(sqlite_url, lm, path), capfd)
    assert "--json-schema" in err and str(path) in err and said in err, err
    assert "RecursionError" not in err
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []
    assert flow_runs() == before


def _limited_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # /dev/zero once grew the command to 21.7 GB


@pytest.mark.slow
@pytest.mark.parametrize(
    ("path", "said"),
    [("fifo", "is a FIFO (named pipe), not a regular file"), ("/dev/zero", "is a character device")],
)
def test_a_fifo_or_a_device_is_refused_at_once_without_reading_it(
    sqlite_url: str, lm: Path, tmp_path: Path, path: str, said: str
) -> None:
    """In a process of its own with a time and memory bound: the old reader waited for a FIFO's writer for
    ever, and read /dev/zero until the kernel's OOM killer came."""
    make_docs(sqlite_url, 3)
    if path == "fifo":
        path = str(tmp_path / "schema.json")
        os.mkfifo(path)
    argv = [sys.executable, "-m", "shardwise.flows.cli", *_args(sqlite_url, lm, path)]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, preexec_fn=_limited_memory)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert f"argument --json-schema: the schema file '{path}' {said}" in lines[0], lines
    assert time.monotonic() - started < 60
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []


# Item 3: $ref stays the schema's.


def test_a_local_ref_schema_generates_held_to_it_and_validated(
    sqlite_url: str, lm: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Before: "Failed to resolve block references in parameters", exit 1, after a failed flow run."""
    from jsonschema import Draft202012Validator

    make_docs(sqlite_url, ROWS)
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(REF_SCHEMA, indent=2))
    code = main(_args(sqlite_url, lm, path))
    captured = capfd.readouterr()
    assert code == 0, captured.err
    assert f"completed: {ROWS} rows scored" in captured.out
    stored = execute(sqlite_url, f"select generated_text, finish_reason, parsed from {TABLE}")
    assert len(stored) == ROWS
    for text, reason, parsed in stored:
        value = json.loads(parsed)
        assert reason == "stop" and value == json.loads(text)
        assert not list(Draft202012Validator(REF_SCHEMA).iter_errors(value)), value
        assert value["label"] in ("good", "bad") and isinstance(value["urgent"], bool)


def test_the_schema_travels_as_its_text_never_as_an_object() -> None:
    """An object would reach Prefect's parameter handling, which loads a block for every {"$ref": ...}."""
    text = json.dumps(REF_SCHEMA)
    params = _params("sqlite:///x.db", "tiny", text)
    generation = params.model.generation
    assert (
        generation.json_schema == text and params.model_dump()["model"]["generation"]["json_schema"] == text
    )
    field = ScoreParams.model_json_schema()["$defs"]["GenerationParams"]["properties"]["json_schema"]
    assert {"type": "string"} in field["anyOf"]  # the form shows a text box, never an object editor
    with pytest.raises(ValidationError, match="must be the schema's JSON text, not a JSON dict"):
        _params("sqlite:///x.db", "tiny", REF_SCHEMA)


def _params(source: str, model: str, schema: object) -> ScoreParams:
    """What the form or the API gives: a source, a model and a JSON Schema for its outputs."""
    return ScoreParams.model_validate(
        {"source": {"location": source}, "model": {"name": model, "generation": {"json_schema": schema}}}
    )


@pytest.fixture
def secret_block() -> tuple[str, str]:
    """A Secret block on the harness's server: its id and its (distinctive) value."""
    from prefect.blocks.system import Secret

    value = "sw-ref-canary-Qz9Kx7Vw4"
    Secret(value=value).save("schema-canary", overwrite=True)
    return str(Secret.load("schema-canary")._block_document_id), value


def _everything_stored(url: str) -> str:
    """Every table of the SQLite file at ``url``, as text, and every flow run's parameters and state."""
    from prefect import get_client

    engine_tables = [t for (t,) in execute(url, "select name from sqlite_master where type = 'table'")]
    dumps = [repr(execute(url, f'select * from "{t}"')) for t in engine_tables]

    async def runs() -> str:
        async with get_client() as client:
            return repr([(r.parameters, r.state) for r in await client.read_flow_runs()])

    return "\n".join([*dumps, asyncio.run(runs())])


def test_a_block_reference_standing_for_a_schema_is_refused_and_never_loaded(
    sqlite_url: str,
    lm: Path,
    tmp_path: Path,
    secret_block: tuple[str, str],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    block_id, value = secret_block
    make_docs(sqlite_url, 3)
    schema = {"type": "object", "properties": {"label": {"$ref": {"block_document_id": block_id}}}}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    before = flow_runs()
    err = _refused(_args(sqlite_url, lm, path), capfd)
    assert "json_schema is not a valid JSON Schema: $.properties.label.$ref:" in err, err
    assert "is not of type 'string'" in err, err
    assert flow_runs() == before
    assert execute(sqlite_url, "select name from sqlite_master where name = 'shardwise_runs'") == []
    with pytest.raises(ValidationError) as caught:  # the form's and the API's way in: the same refusal
        _params(sqlite_url, str(lm), json.dumps(schema))
    seen = {
        "terminal": err,
        "form": str(caught.value),
        "logs": caplog.text,
        "stored": _everything_stored(sqlite_url),
    }
    assert not [where for where, text in seen.items() if value in text], seen


def test_a_block_reference_as_plain_json_in_a_schema_stays_plain_json(
    sqlite_url: str,
    lm: Path,
    tmp_path: Path,
    secret_block: tuple[str, str],
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Where JSON Schema takes any JSON (a default, an example), the reference is just data: the run goes
    on, and neither the block's value nor anything it would have become is anywhere."""
    block_id, value = secret_block
    make_docs(sqlite_url, ROWS)
    schema = {**REF_SCHEMA, "default": {"$ref": {"block_document_id": block_id}}}
    path = tmp_path / "schema.json"
    path.write_text(json.dumps(schema))
    code = main(_args(sqlite_url, lm, path))
    captured = capfd.readouterr()
    assert code == 0, captured.err
    stored = _everything_stored(sqlite_url)
    assert block_id in stored  # the schema's text as given: the reference was never resolved
    seen = {"terminal": captured.out + captured.err, "logs": caplog.text, "stored": stored}
    assert not [where for where, text in seen.items() if value in text], seen
