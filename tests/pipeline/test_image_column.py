"""--image-column through the run spec, the form, the CLI and the only-new plan; fetching rules."""

from __future__ import annotations

import argparse
import hashlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from botocore.exceptions import ClientError
from image_builders import tiny_vit_classifier
from pydantic import ValidationError
from spec_builder import flat_spec

from shardwise.errors import ConfigError, RetryDeadlineError
from shardwise.flows.cli_options import SOURCE_OPTIONS, add_param_options, score_params
from shardwise.lineage import value_fingerprint
from shardwise.model.binary_value import BinaryValue
from shardwise.model.generation import GenerationSettings
from shardwise.pipeline.source_plan import plan_source
from shardwise.pipeline.spec import as_is
from shardwise.pipeline.worker import open_spec_source
from shardwise.retry_policy import RetryPolicy
from shardwise.sources.base import SourceRow
from shardwise.sources.images import ImageAccess, ImageColumn
from shardwise.sources.images.s3_get import get_image
from shardwise.sources.keyed import KeyedSource

BASE = {"source": "sqlite:///x.db", "results": "sqlite:///x.db", "results_table": "r", "table": "docs"}


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"text_column": "body"}, "--text-column 'body'"),
        ({"text_pair_column": "pair"}, "--text-pair-column 'pair'"),
        ({"generation": GenerationSettings(prompt="Describe {text}")}, "--prompt 'Describe {text}'"),
    ],
)
def test_an_image_column_refuses_text_options_in_one_line(given: dict[str, object], named: str) -> None:
    with pytest.raises(ConfigError) as caught:
        flat_spec(**BASE, image_column="img", **given)  # type: ignore[arg-type]
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"--image-column 'img' replaces the text column, so it takes no {named}; drop ")
    assert message.endswith("or drop --image-column")


def test_an_image_column_is_not_the_key() -> None:
    with pytest.raises(ConfigError, match="not the key 'id'"):
        flat_spec(**BASE, image_column="id")  # type: ignore[arg-type]


def test_the_cli_option_reaches_the_spec() -> None:
    parser = argparse.ArgumentParser()
    add_param_options(parser, SOURCE_OPTIONS)
    assert "source.image_column" in {action.dest for action in parser._actions}
    args = parser.parse_args(["--source", "sqlite:///x.db", "--table", "docs", "--image-column", "img"])
    assert score_params(args).to_spec().source.image_column == "img"
    bad = parser.parse_args(["--source", "sqlite:///x.db", "--image-column", "img", "--text-column", "t"])
    with pytest.raises(ValidationError, match="drop --text-column, or drop --image-column"):
        score_params(bad)  # refused as the parameters are read, in the form too


def _refs_table(url: str, tmp_path: Path) -> dict[int, bytes]:
    images = {1: b"first image", 2: b"second image", 3: b"third image"}
    for key, data in images.items():
        (tmp_path / f"{key}.png").write_bytes(data)
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE docs (id INTEGER PRIMARY KEY, img TEXT)"))
        conn.execute(
            sa.text("INSERT INTO docs VALUES (:k, :r)"),
            [*({"k": k, "r": str(tmp_path / f"{k}.png")} for k in images), {"k": 4, "r": "/no/such.png"}],
        )
    engine.dispose()
    return images


class _HeldInputs:
    """A sink at its protocol boundary: only what only-new asks, the (key, fingerprint) pairs it holds."""

    target = "held"

    def __init__(self, held: dict[str, str | None]) -> None:
        self.held = held

    def committed_inputs(self, model_version: str) -> Iterator[tuple[str, str | None]]:
        assert model_version == "m1"
        yield from self.held.items()


def test_only_new_compares_references_by_the_md5_of_the_fetched_bytes(
    sqlite_url: str, tmp_path: Path
) -> None:
    images = _refs_table(sqlite_url, tmp_path)
    spec = flat_spec(**{**BASE, "source": sqlite_url, "results": sqlite_url}, image_column="img",
                     only_new=True, image_access=ImageAccess(roots=(str(tmp_path),)))  # fmt: skip
    held = {str(k): hashlib.md5(v).hexdigest() for k, v in images.items()}
    (tmp_path / "2.png").write_bytes(b"the second image, redrawn behind the same path")
    with open_spec_source(spec, as_is) as source:
        assert not source.fingerprints_in_database  # so the pipeline asks the sink, as here
        plan = plan_source(spec, source, "m1", None, sink=_HeldInputs(held))  # type: ignore[arg-type]
        keyed = KeyedSource(source, [])  # as a worker reads a keyed plan
        keys = [row.key for shard in plan.shards for row in keyed.read(plan, shard)]
    assert keys == [2, 4]  # the changed object, and the missing file (no fingerprint) stays new


def test_an_only_new_run_of_references_plans_in_python(sqlite_url: str, tmp_path: Path, pipeline) -> None:  # type: ignore[no-untyped-def]
    """Results in the source database: the run still compares fetched bytes, not the reference text."""
    _refs_table(sqlite_url, tmp_path)
    declared = ImageAccess(roots=(str(tmp_path),))
    model = str(tiny_vit_classifier(tmp_path / "vit"))  # an image model: a text model is refused
    spec = flat_spec(model=model, **{**BASE, "source": sqlite_url, "results": sqlite_url},
                   image_column="img", only_new=True, image_access=declared)  # fmt: skip
    planned, outcome = pipeline.run(spec, "first")
    assert planned.plan.params.get("keyed")  # the keyed plan of the Python-side comparison
    assert outcome.rows_in == 4  # the "pictures" are text, dead letters; every row was read and handed on


def test_fetches_keep_row_order_however_long_each_takes(tmp_path: Path) -> None:
    column = ImageColumn("img", threads=4, access=ImageAccess(roots=(str(tmp_path),)))
    for i in range(50):
        (tmp_path / f"{i}").write_bytes(str(i).encode())
    slow = column.value

    def value(raw: object) -> BinaryValue:
        time.sleep(0.01 * (hash(raw) % 3))  # later rows often finish first
        return slow(raw)

    column.value = value  # type: ignore[method-assign]
    rows = (SourceRow(i, str(tmp_path / f"{i}")) for i in range(50))
    out = list(column.rows(rows))
    assert [(r.key, r.value.data) for r in out] == [(i, str(i).encode()) for i in range(50)]


def test_image_fingerprints_are_the_md5_of_their_bytes() -> None:
    assert value_fingerprint(BinaryValue(b"abc", origin="s3://b/k")) == hashlib.md5(b"abc").hexdigest()
    assert value_fingerprint(BinaryValue(None, origin="/x.png", error="no such file /x.png")) is None


class _Failing:
    """An S3 client at its protocol boundary that always answers one error code."""

    def __init__(self, code: str, status: int) -> None:
        self.calls = 0
        self._error = {
            "Error": {"Code": code, "Message": "test"},
            "ResponseMetadata": {"HTTPStatusCode": status},
        }

    def get_object(self, **_: Any) -> Any:
        self.calls += 1
        raise ClientError(self._error, "GetObject")  # type: ignore[arg-type]


def test_a_transient_s3_failure_outlasting_the_deadline_fails_the_read() -> None:
    client = _Failing("SlowDown", 503)
    gives_up = r"reading image s3://b/k\.png kept failing .* deadline of 0\.2 s"
    with pytest.raises(RetryDeadlineError, match=gives_up):
        get_image(client, "s3://b/k.png", RetryPolicy(deadline_s=0.2, backoff_s=0.01, backoff_cap_s=0.01))
    assert client.calls >= 5


def test_a_missing_s3_object_is_the_rows_error_not_a_raise() -> None:
    value = get_image(_Failing("NoSuchKey", 404), "s3://b/k.png", RetryPolicy(backoff_s=0))
    assert value == BinaryValue(
        None, origin="s3://b/k.png", error="no such object s3://b/k.png (S3 answered NoSuchKey)"
    )
