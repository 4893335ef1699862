"""Runs into PostgreSQL with pgvector (pgserver's own server): vector columns, an HNSW index built once the
run committed, the same embeddings as the real[] path, only-new, and refusals before anything runs."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest
import sqlalchemy as sa
from cli_helpers import one_line
from flow_data import execute, make_docs

from shardwise.flows.cli import main

pytestmark = [pytest.mark.postgres, pytest.mark.usefixtures("prefect_harness")]

ROWS = 300


@pytest.fixture
def bare_pgvector_db(pgvector_url: str) -> Iterator[str]:
    """A fresh database on the pgvector server without the extension: a run with auto creates it."""
    name = f"sw_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pgvector_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        yield sa.make_url(pgvector_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def _run(source: str, *extra: str) -> list[str]:
    model = ["--model", "tiny", "--precision", "fp32", "--shards", "2"]
    return ["run", "--source", source, "--table", "docs", *model, *extra]


def _column_type(url: str, table: str, column: str) -> str:
    sql = f"select format_type(atttypid, atttypmod) from pg_attribute where attrelid = '{table}'::regclass "
    return str(execute(url, sql + f"and attname = '{column}'")[0][0])


def _vectors(url: str, table: str) -> dict[int, np.ndarray]:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(sa.text(f"select source_key, embedding::real[] from {table}")).all()
    engine.dispose()
    return {int(k): np.asarray(v, dtype=np.float32) for k, v in rows}


def test_a_run_into_pgvector_gives_vector_columns_an_hnsw_index_and_the_sql_paths_embeddings(
    sqlite_url: str, bare_pgvector_db: str, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)  # and three bad rows
    into = ["--results", bare_pgvector_db, "--results-table", "docs_vec", "--index", "hnsw"]
    assert main(_run(sqlite_url, *into)) == 0
    captured = capfd.readouterr()
    assert f"{ROWS} rows scored ({ROWS} new" in captured.out
    assert "built HNSW index docs_vec_embedding_hnsw_cosine" in captured.out + captured.err

    assert execute(bare_pgvector_db, "select extname from pg_extension where extname = 'vector'")
    assert _column_type(bare_pgvector_db, "docs_vec", "embedding").startswith("vector(")
    assert execute(bare_pgvector_db, "select count(*), count(distinct source_key) from docs_vec") == [
        (ROWS, ROWS)
    ]
    (indexdef,) = execute(bare_pgvector_db, "select indexdef from pg_indexes where tablename = 'docs_vec' "
                          "and indexname like '%hnsw%'")[0]  # fmt: skip
    assert "hnsw" in indexdef and "vector_cosine_ops" in indexdef
    # The ledger went to the results database, dead letters with it.
    assert execute(bare_pgvector_db, "select count(*) from shardwise_errors") == [(3,)]

    # The same rows through the real[] path give the same embeddings, bit for bit.
    assert main(_run(sqlite_url, "--results-table", "docs_array")) == 0
    array = {k: np.frombuffer(v, dtype=np.float32) for k, v in execute(sqlite_url, "select source_key, "
             "embedding from docs_array")}  # fmt: skip
    vectors = _vectors(bare_pgvector_db, "docs_vec")
    assert vectors.keys() == array.keys()
    assert all(np.array_equal(vectors[k], array[k]) for k in array)

    # Nearest neighbours over the results: a row is its own nearest.
    nearest = execute(
        bare_pgvector_db,
        "select source_key from docs_vec order by embedding <=> "
        "(select embedding from docs_vec where source_key = 17) limit 3",
    )
    assert nearest[0] == (17,)

    # A second only-new run scores nothing; the index is there already.
    capfd.readouterr()
    assert main(_run(sqlite_url, *into, "--only-new")) == 0
    out = capfd.readouterr().out
    assert "0 rows scored" in out


def test_halfvec_halves_the_storage(sqlite_url: str, pgvector_db_url: str) -> None:
    make_docs(sqlite_url, 50, bad=False)
    into = ["--results", pgvector_db_url, "--results-table", "docs_half", "--embedding-type", "halfvec"]
    assert main(_run(sqlite_url, *into, "--index", "hnsw", "--index-metric", "l2")) == 0
    assert _column_type(pgvector_db_url, "docs_half", "embedding").startswith("halfvec(")
    assert execute(pgvector_db_url, "select count(*) from docs_half") == [(50,)]
    assert execute(pgvector_db_url, "select count(*) from pg_indexes where tablename = 'docs_half' and "
                   "indexdef like '%halfvec_l2_ops%'") == [(1,)]  # fmt: skip


@pytest.mark.parametrize("kind", ["vector", "halfvec"])
def test_a_named_pgvector_type_creates_the_extension_as_auto_does(
    sqlite_url: str, bare_pgvector_db: str, kind: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """--embedding-type vector (or halfvec) --index hnsw into a database where pgvector is available but not
    created: the run creates it, as auto does, instead of refusing (it was refused before anything ran)."""
    make_docs(sqlite_url, 40, bad=False)
    into = ["--results", bare_pgvector_db, "--results-table", "docs_named", "--embedding-type", kind]
    assert main(_run(sqlite_url, *into, "--index", "hnsw")) == 0, capfd.readouterr()
    assert "40 rows scored (40 new" in capfd.readouterr().out
    assert execute(bare_pgvector_db, "select extname from pg_extension where extname = 'vector'")
    assert _column_type(bare_pgvector_db, "docs_named", "embedding").startswith(f"{kind}(")
    assert execute(bare_pgvector_db, "select count(*) from pg_indexes where tablename = 'docs_named' and "
                   f"indexdef like '%hnsw (embedding {kind}_cosine_ops)%'") == [(1,)]  # fmt: skip


def test_an_existing_real_array_table_keeps_its_type_under_auto(
    sqlite_url: str, pgvector_db_url: str
) -> None:
    make_docs(sqlite_url, 20, bad=False)
    into = ["--results", pgvector_db_url, "--results-table", "docs_old"]
    assert main(_run(sqlite_url, *into, "--embedding-type", "array")) == 0
    execute(sqlite_url, "insert into docs (id, text) values (5000, 'a brand new row')")
    assert main(_run(sqlite_url, *into, "--only-new")) == 0
    assert _column_type(pgvector_db_url, "docs_old", "embedding") == "real[]"
    assert execute(pgvector_db_url, "select count(*) from docs_old") == [(21,)]


def test_pgvector_options_where_pgvector_is_not_are_one_line_before_anything_runs(
    sqlite_url: str, pg_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, 5)
    assert main(_run(sqlite_url, "--results", pg_url, "--embedding-type", "vector")) == 2
    line = one_line(capfd)
    assert "pgvector" in line and "--embedding-type array" in line
    assert main(_run(sqlite_url, "--results", pg_url, "--index", "hnsw")) == 2
    assert "index hnsw needs pgvector" in one_line(capfd)
    argv = _run(sqlite_url, "--results", sqlite_url, "--index", "hnsw", "--embedding-type", "array")
    assert main(argv) == 2
    assert "drop --index" in one_line(capfd)
    no_ledger = "select count(*) from information_schema.tables where table_name = 'shardwise_runs'"
    assert execute(pg_url, no_ledger) == [(0,)]
    assert "shardwise_runs" not in {r[0] for r in execute(sqlite_url, "select name from sqlite_master")}


@pytest.mark.filterwarnings("error::sqlalchemy.exc.SAWarning")
def test_only_new_in_the_source_database_anti_joins_a_pgvector_table(
    pgvector_db_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    make_docs(pgvector_db_url, 40, bad=False)
    argv = _run(pgvector_db_url, "--results-table", "docs_vec")  # results and ledger in the source database
    assert main(argv) == 0
    execute(pgvector_db_url, "update docs set text = 'changed' where id = 3")
    capfd.readouterr()
    assert main([*argv, "--only-new"]) == 0
    captured = capfd.readouterr()
    assert "1 row scored (0 new, 1 updated" in captured.out
    assert "Warning" not in captured.err
    assert _column_type(pgvector_db_url, "docs_vec", "embedding").startswith("vector(")
