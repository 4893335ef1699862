"""Text pairs: scored as pairs, fingerprinted over both texts, a bad member dead-lettered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import torch
from flow_data import execute
from spec_builder import flat_spec

from shardwise.errors import ConfigError, SourceError
from shardwise.lineage import value_fingerprint
from shardwise.model import ModelInputs
from shardwise.model.text import Inputs
from shardwise.pipeline import RunSpec

QUERIES = ["how do I sort a list", "what is a shard", "retry a failed merge", "pad each batch"]
DOCS = [
    "sorted(xs) returns a new list; xs.sort() sorts in place.",
    "A shard is a deterministic slice of the source table, scored by one task.",
    "A transient error retries the step on a fresh connection, without scoring again.",
    "Rows are ordered by length and each batch is padded to its own longest row; " * 3,
]
GOOD = 40
BAD = {100: ("a query", None), 101: ("a query", "   "), 102: (None, "a document")}


def _rows() -> dict[int, tuple[Any, Any]]:
    rows: dict[int, tuple[Any, Any]] = {
        i: (QUERIES[i % 4] + f" #{i}", DOCS[(i * 3) % 4]) for i in range(GOOD)
    }
    return {**rows, **BAD}


def _make_pairs(url: str) -> dict[int, tuple[Any, Any]]:
    rows = _rows()
    execute(url, "create table pairs (id bigint primary key, query text, doc text)")
    execute(
        url,
        "insert into pairs (id, query, doc) values (:id, :q, :d)",
        [{"id": k, "q": q, "d": d} for k, (q, d) in rows.items()],
    )
    return rows


def _spec(url: str, **overrides: Any) -> RunSpec:
    fields: dict[str, Any] = {
        "source": url,
        "results": url,
        "results_table": "scores",
        "table": "pairs",
        "text_column": "query",
        "text_pair_column": "doc",
        "model": "tiny",
        "shards": 2,
        "precision": "fp32",
    }
    return flat_spec(**{**fields, **overrides})


def _pair_embedding(model: Any, query: str, doc: str) -> np.ndarray:
    ids = torch.tensor([model.encode((query, doc)).ids])
    with torch.inference_mode():
        return model.run(ModelInputs(ids))[0].numpy()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    name = "sqlite_url" if request.param == "sqlite" else "pg_url"
    return str(request.getfixturevalue(name))


def test_pairs_are_scored_as_pairs_with_both_texts_in_the_fingerprint(db_url, pipeline, tiny_model) -> None:
    rows = _make_pairs(db_url)
    _, counts = pipeline.run(_spec(db_url), "pairs")
    assert (counts.rows_out, counts.rows_failed) == (GOOD, len(BAD))

    stored = execute(
        db_url, "select source_key, embedding, input_fingerprint from scores order by source_key"
    )
    assert [k for k, _, _ in stored] == list(range(GOOD))
    for key, blob, fingerprint in stored:
        query, doc = rows[key]
        vector = np.asarray(blob, dtype=np.float32) if isinstance(blob, list) else np.frombuffer(blob, "<f4")
        np.testing.assert_allclose(vector, _pair_embedding(tiny_model, query, doc), atol=1e-5)
        assert fingerprint == value_fingerprint(Inputs.pair(query, doc))
        assert fingerprint != value_fingerprint(query), "the pair's fingerprint is not the text's alone"

    errors = dict(execute(db_url, "select source_key, message from shardwise_errors order by source_key"))
    assert "text pair is null" in errors["100"]
    assert "text pair is empty or only whitespace" in errors["101"]
    assert errors["102"].startswith("text is null")


def test_only_new_sees_a_change_to_either_text(db_url, pipeline) -> None:
    _make_pairs(db_url)
    pipeline.run(_spec(db_url), "first")
    _, again = pipeline.run(_spec(db_url, only_new=True), "again")
    assert again.rows_in == len(BAD), (
        "only the dead-lettered rows are new: the database's fingerprint matches"
    )

    execute(db_url, "update pairs set doc = 'a changed document' where id = 3")
    execute(db_url, "update pairs set query = 'a changed query' where id = 7")
    _, changed = pipeline.run(_spec(db_url, only_new=True), "changed")
    assert changed.rows_in == len(BAD) + 2
    assert changed.rows_out == 2


def test_parquet_pairs(tmp_path: Path, pipeline, tiny_model, sqlite_url: str) -> None:
    rows = _rows()
    data = tmp_path / "pairs"
    data.mkdir()
    frame = pl.DataFrame(
        {"id": list(rows), "query": [q for q, _ in rows.values()], "doc": [d for _, d in rows.values()]}
    )
    frame.write_parquet(data / "part-0.parquet", row_group_size=10)
    spec = _spec(str(data), results=sqlite_url, table=None)
    _, counts = pipeline.run(spec, "parquet")
    assert (counts.rows_out, counts.rows_failed) == (GOOD, len(BAD))
    query, doc = rows[5]
    ((blob, fingerprint),) = execute(
        sqlite_url, "select embedding, input_fingerprint from scores where source_key = 5"
    )
    np.testing.assert_allclose(np.frombuffer(blob, "<f4"), _pair_embedding(tiny_model, query, doc), atol=1e-5)
    assert fingerprint == value_fingerprint(Inputs.pair(query, doc))


def test_a_wrong_pair_column_is_refused_with_the_columns(sqlite_url: str, pipeline) -> None:
    _make_pairs(sqlite_url)
    with pytest.raises(
        SourceError, match=r"text pair column 'dco' not in table 'pairs'; columns are: id, query, doc"
    ):
        pipeline.run(_spec(sqlite_url, text_pair_column="dco"), "wrong")
    with pytest.raises(ConfigError, match="text_pair_column 'query' is also the text column"):
        _spec(sqlite_url, text_pair_column="query")
    tables = {name for (name,) in execute(sqlite_url, "select name from sqlite_master")}
    recorded = (
        execute(sqlite_url, "select count(*) from shardwise_runs") if "shardwise_runs" in tables else [(0,)]
    )
    assert recorded == [(0,)], "no run was recorded"
