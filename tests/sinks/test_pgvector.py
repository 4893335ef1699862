"""pgvector support: type choice, SQLAlchemy types, binary COPY, HNSW index, nearest-neighbour queries.

pgvector runs on pgserver's own PostgreSQL (``pgvector_url``); the shared
server on 127.0.0.1:5432 has no pgvector and stands for the databases where
``auto`` must fall back to ``real[]``.
"""

from __future__ import annotations

import logging
import struct
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import sqlalchemy as sa

from shardwise.errors import ConfigError
from shardwise.sinks.sql.pgvector import (
    HalfVec,
    Vector,
    copy_type_name,
    create_ann_index,
    hnsw_index_name,
    pg_binary_vector,
    recognise_vector_types,
    reflected_vector_family,
    register_vector_dumpers,
    resolve_embedding_type,
)

DIM = 384


def _vectors(n: int, seed: int = 7, dim: int = DIM) -> np.ndarray:
    rng = np.random.default_rng(seed)
    arr = rng.standard_normal((n, dim)).astype(np.float32)
    return arr / np.linalg.norm(arr, axis=1, keepdims=True)


def _table(dim: int = DIM, name: str = "docs_embeddings") -> sa.Table:
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("source_key", sa.BigInteger(), primary_key=True),
        sa.Column("model_version", sa.Text(), nullable=False),
        sa.Column("embedding", Vector(dim)),
        sa.Column("half", HalfVec(dim)),
    )


@pytest.fixture
def vec_engine(pgvector_db_url: str) -> Iterator[sa.Engine]:
    engine = sa.create_engine(pgvector_db_url)
    try:
        yield engine
    finally:
        engine.dispose()


def _copy_rows(engine: sa.Engine, table: sa.Table, vectors: np.ndarray) -> None:
    """Load rows by binary COPY, as the SQL sink's staging does."""
    with engine.begin() as conn:
        raw: Any = conn.connection.driver_connection
        with raw.cursor() as cursor:
            register_vector_dumpers(cursor.adapters, raw)
            cols = "source_key, model_version, embedding, half"
            with cursor.copy(f"COPY {table.name} ({cols}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "text", copy_type_name("vector"), copy_type_name("halfvec")])
                for key, vec in enumerate(vectors):
                    copy.write_row([key, "m1", vec, vec])


# resolve_embedding_type


@pytest.mark.postgres
def test_auto_is_vector_where_pgvector_is_installed(vec_engine: sa.Engine) -> None:
    with vec_engine.connect() as conn:
        assert resolve_embedding_type(conn, "auto", DIM, create=False) == "vector"
        assert resolve_embedding_type(conn, "halfvec", DIM, create=False) == "halfvec"
        assert resolve_embedding_type(conn, "array", DIM, create=False) == "array"


@pytest.mark.postgres
@pytest.mark.parametrize("requested", ["auto", "vector", "halfvec"])
def test_every_pgvector_type_creates_the_extension_where_it_is_available_and_allowed(
    vec_engine: sa.Engine, requested: str
) -> None:
    """auto, vector and halfvec alike: a check (create=False) answers what the run will get and creates
    nothing; the run (create=True) creates the extension."""
    installed = sa.text("SELECT count(*) FROM pg_extension WHERE extname = 'vector'")
    with vec_engine.begin() as conn:
        conn.execute(sa.text("DROP EXTENSION vector"))
    expected = "vector" if requested == "auto" else requested
    with vec_engine.begin() as conn:
        assert resolve_embedding_type(conn, requested, DIM, create=False) == expected  # type: ignore[arg-type]
    with vec_engine.connect() as conn:
        assert conn.execute(installed).scalar() == 0, "a check created the extension"
    with vec_engine.begin() as conn:
        assert resolve_embedding_type(conn, requested, DIM, create=True) == expected  # type: ignore[arg-type]
    with vec_engine.connect() as conn:
        assert conn.execute(installed).scalar() == 1


@pytest.mark.postgres
def test_a_role_that_may_not_create_pgvector_falls_back_to_array_and_says_why(
    vec_engine: sa.Engine, caplog: pytest.LogCaptureFixture
) -> None:
    role = f"app_{uuid.uuid4().hex[:8]}"
    with vec_engine.begin() as conn:
        conn.execute(sa.text("DROP EXTENSION vector"))
        conn.execute(sa.text(f"CREATE ROLE {role} LOGIN"))
    app = sa.create_engine(vec_engine.url.set(username=role))
    try:
        with app.connect() as conn, caplog.at_level(logging.WARNING):
            assert resolve_embedding_type(conn, "auto", DIM, create=True) == "array"
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1  # the savepoint kept the transaction
            with pytest.raises(ConfigError, match="permission denied") as err:
                resolve_embedding_type(conn, "vector", DIM, create=True)
            # A check gives the same answers, quietly: the run is the one that warns.
            assert resolve_embedding_type(conn, "auto", DIM, create=False) == "array"
            with pytest.raises(ConfigError, match="permission denied") as checked:
                resolve_embedding_type(conn, "halfvec", DIM, create=False)
        assert "--embedding-type array" in str(err.value) and "could not create" in str(err.value)
        assert "superuser" in str(checked.value)
        assert caplog.text.count("CREATE EXTENSION vector failed") == 1 and "real[]" in caplog.text
    finally:
        app.dispose()
        with vec_engine.begin() as conn:
            conn.execute(sa.text(f"DROP ROLE {role}"))


@pytest.mark.postgres
def test_without_pgvector_auto_is_array_and_vector_names_the_database_and_the_fix(pg_url: str) -> None:
    engine = sa.create_engine(sa.make_url(pg_url).set(password="sekret-pw"))  # trust: ignored
    try:
        with engine.connect() as conn:
            assert resolve_embedding_type(conn, "auto", DIM, create=True) == "array"
            with pytest.raises(ConfigError) as err:
                resolve_embedding_type(conn, "vector", DIM, create=True)
    finally:
        engine.dispose()
    message = str(err.value)
    assert "sekret-pw" not in message and "***" in message
    assert "CREATE EXTENSION vector" in message and "--embedding-type array" in message


def test_sqlite_is_array_and_refuses_pgvector_types(sqlite_url: str) -> None:
    engine = sa.create_engine(sqlite_url)
    with engine.connect() as conn:
        assert resolve_embedding_type(conn, "auto", DIM, create=True) == "array"
        with pytest.raises(ConfigError, match=r"needs PostgreSQL with pgvector.*--embedding-type array"):
            resolve_embedding_type(conn, "halfvec", DIM, create=True)
        with pytest.raises(ConfigError, match="'bogus' is not one of: auto, array, vector, halfvec"):
            resolve_embedding_type(conn, "bogus", DIM, create=True)  # type: ignore[arg-type]
    engine.dispose()


@pytest.mark.postgres
def test_past_16000_dims_auto_is_array_and_vector_is_refused(vec_engine: sa.Engine) -> None:
    with vec_engine.connect() as conn:
        assert resolve_embedding_type(conn, "auto", 16001, create=False) == "array"
        with pytest.raises(ConfigError, match=r"at most 16000 dimensions.*16001"):
            resolve_embedding_type(conn, "vector", 16001, create=False)


# Types, COPY, reflection


def test_the_binary_form_is_dim_unused_then_big_endian_floats() -> None:
    assert pg_binary_vector(np.array([1.0, -2.0], dtype=np.float32)) == struct.pack(">HHff", 2, 0, 1.0, -2.0)
    assert copy_type_name("array") == "float4[]"


@pytest.mark.postgres
def test_binary_copy_round_trips_384_dim_vectors_and_halfvecs(vec_engine: sa.Engine) -> None:
    table = _table()
    vectors = _vectors(200) * 3
    with vec_engine.begin() as conn:
        table.create(conn)
    _copy_rows(vec_engine, table, vectors)
    with vec_engine.connect() as conn:
        rows = conn.execute(sa.select(table.c.embedding, table.c.half).order_by(table.c.source_key)).all()
    assert len(rows) == len(vectors)
    for (vec, half), want in zip(rows, vectors, strict=True):
        assert vec.dtype == np.float32 and np.array_equal(vec, want)
        assert np.array_equal(half, want.astype(np.float16).astype(np.float32))
        np.testing.assert_allclose(half, want, rtol=1e-3, atol=1e-4)


@pytest.mark.postgres
def test_the_sqlalchemy_types_round_trip_and_render(vec_engine: sa.Engine) -> None:
    table = _table(dim=3)
    ddl = str(sa.schema.CreateTable(table).compile(dialect=vec_engine.dialect))
    assert "vector(3)" in ddl and "halfvec(3)" in ddl
    want = np.array([0.1, -2.5, 1e-7], dtype=np.float32)
    with vec_engine.begin() as conn:
        table.create(conn)
        row = {"source_key": 1, "model_version": "m", "embedding": want, "half": want}
        conn.execute(sa.insert(table), [row])
        conn.execute(sa.insert(table), [{"source_key": 2, "model_version": "m", "embedding": None}])
        rows = conn.execute(sa.select(table.c.embedding, table.c.half).order_by(table.c.source_key)).all()
        with pytest.raises(sa.exc.StatementError, match="vectors of 3 floats"):
            conn.execute(sa.insert(table), [{"source_key": 3, "model_version": "m", "embedding": [1.0]}])
    assert np.array_equal(rows[0][0], want) and rows[0][0].dtype == np.float32
    assert np.array_equal(rows[0][1], want.astype(np.float16).astype(np.float32))
    assert rows[1] == (None, None)


@pytest.mark.postgres
def test_reflection_recognises_the_columns_exactly_and_quietly(vec_engine: sa.Engine) -> None:
    with vec_engine.begin() as conn:
        _table().create(conn)
    with vec_engine.connect() as conn:
        with warnings.catch_warnings(record=True) as unknown:
            warnings.simplefilter("always")
            sa.inspect(conn).get_columns("docs_embeddings")
        assert {str(w.message) for w in unknown} >= {
            "Did not recognize type 'vector' of column 'embedding'",
            "Did not recognize type 'halfvec' of column 'half'",
        }
        assert reflected_vector_family(conn, "docs_embeddings", None) == {
            "embedding": "vector(384)",
            "half": "halfvec(384)",
        }
        assert reflected_vector_family(conn, "docs_embeddings", "public")["half"] == "halfvec(384)"
        assert reflected_vector_family(conn, "no_such_table", None) == {}
    recognise_vector_types(vec_engine.dialect)
    with vec_engine.connect() as conn, warnings.catch_warnings():
        warnings.simplefilter("error")
        columns = {c["name"]: c["type"] for c in sa.inspect(conn).get_columns("docs_embeddings")}
    assert isinstance(columns["embedding"], Vector) and columns["embedding"].dim == DIM
    assert isinstance(columns["half"], HalfVec) and columns["half"].dim == DIM


# HNSW index


@pytest.mark.postgres
@pytest.mark.parametrize("kind", ["vector", "halfvec"])
def test_the_index_is_built_once_then_left_alone(
    vec_engine: sa.Engine, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    table = _table()
    column = "embedding" if kind == "vector" else "half"
    with vec_engine.begin() as conn:
        table.create(conn)
    _copy_rows(vec_engine, table, _vectors(100))
    with caplog.at_level(logging.INFO, logger="shardwise.sinks.sql.pgvector_index"):
        first = create_ann_index(vec_engine, table, column, kind, "cosine")  # type: ignore[arg-type]
    again = create_ann_index(vec_engine, table, column, kind, "cosine")  # type: ignore[arg-type]
    assert first.created and first.name == f"docs_embeddings_{column}_hnsw_cosine"
    assert not again.created and again.name == first.name and again.seconds == 0.0
    assert f"built HNSW index {first.name} on docs_embeddings({column}) in " in caplog.text
    assert not table.indexes  # the caller's Table did not gain the index
    with vec_engine.connect() as conn:
        indexdef = conn.execute(
            sa.text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": first.name}
        ).scalar_one()
    assert f"USING hnsw ({column} {kind}_cosine_ops)" in indexdef


@pytest.mark.postgres
def test_an_invalid_leftover_of_a_failed_concurrent_build_is_rebuilt(vec_engine: sa.Engine) -> None:
    table = _table()
    name = hnsw_index_name("docs_embeddings", "embedding", "l2")
    with vec_engine.begin() as conn:
        table.create(conn)
    _copy_rows(vec_engine, table, _vectors(20))
    with vec_engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        # A real failed concurrent build: duplicates break the unique index, which stays INVALID.
        with pytest.raises(sa.exc.IntegrityError):
            conn.execute(
                sa.text(f"CREATE UNIQUE INDEX CONCURRENTLY {name} ON docs_embeddings (model_version)")
            )
        valid = sa.text("SELECT indisvalid FROM pg_index WHERE indexrelid = CAST(:n AS regclass)")
        assert conn.execute(valid, {"n": name}).scalar_one() is False
    built = create_ann_index(vec_engine, table, "embedding", "vector", "l2")
    assert built.created and built.name == name
    with vec_engine.connect() as conn:
        assert conn.execute(valid, {"n": name}).scalar_one() is True
        indexdef = conn.execute(sa.text("SELECT pg_get_indexdef(CAST(:n AS regclass))"), {"n": name}).scalar()
    assert "USING hnsw (embedding vector_l2_ops)" in indexdef


@pytest.mark.postgres
def test_the_index_refuses_real_arrays_and_too_many_dims(vec_engine: sa.Engine) -> None:
    wide = _table(dim=2001, name="wide")
    with vec_engine.begin() as conn:
        wide.create(conn)
    with pytest.raises(ConfigError, match=r"needs a pgvector column.*--embedding-type vector or halfvec"):
        create_ann_index(vec_engine, wide, "embedding", "array", "cosine")
    with pytest.raises(ConfigError, match=r"at most 2000 dimensions; wide.embedding has 2001.*halfvec"):
        create_ann_index(vec_engine, wide, "embedding", "vector", "ip")
    with pytest.raises(ConfigError, match=r"wide.embedding to be a halfvec\(n\) column; it is vector"):
        create_ann_index(vec_engine, wide, "embedding", "halfvec", "ip")
    assert create_ann_index(vec_engine, wide, "half", "halfvec", "ip").created


def test_index_names_are_deterministic_and_fit_63_characters() -> None:
    name = hnsw_index_name("t" * 60, "embedding", "cosine")
    assert len(name) == 63 and name == hnsw_index_name("t" * 60, "embedding", "cosine")
    assert name != hnsw_index_name("t" * 60, "embedding", "l2")


# Nearest neighbours


def _nearest(conn: sa.Connection, table: sa.Table, query: np.ndarray) -> list[int]:
    distance = table.c.embedding.cosine_distance(query)
    stmt = sa.select(table.c.source_key).where(table.c.model_version == "m1").order_by(distance).limit(10)
    return list(conn.execute(stmt).scalars())


@pytest.mark.postgres
def test_nearest_neighbours_with_and_without_the_index(vec_engine: sa.Engine) -> None:
    table = _table()
    vectors = _vectors(1000)
    with vec_engine.begin() as conn:
        table.create(conn)
    _copy_rows(vec_engine, table, vectors)
    query = vectors[42] + 0.05 * _vectors(1, seed=3)[0]
    expected = list(np.argsort(-(vectors @ (query / np.linalg.norm(query))))[:10])
    with vec_engine.connect() as conn:
        assert _nearest(conn, table, query) == expected  # exact: a sequential scan
    built = create_ann_index(vec_engine, table, "embedding", "vector", "cosine")
    with vec_engine.connect() as conn:
        conn.execute(sa.text("ANALYZE docs_embeddings"))
        conn.execute(sa.text("SET enable_seqscan = off"))
        plan = conn.execute(
            sa.text("EXPLAIN SELECT source_key FROM docs_embeddings ORDER BY embedding <=> :q LIMIT 10"),
            {"q": "[" + ",".join(map(str, query.tolist())) + "]"},
        ).scalars()
        assert built.name in "\n".join(plan)
        found = _nearest(conn, table, query)
    assert found[0] == 42 and len(set(found) & set(expected)) >= 8  # HNSW is approximate
