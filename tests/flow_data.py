"""Build source tables and Parquet objects for the flow tests, and read back what a run wrote."""

from __future__ import annotations

import io
import random
from typing import Any

import polars as pl
import sqlalchemy as sa
from spec_builder import flat_spec

from shardwise.corpus import harvest_docstrings

BAD_ROWS: list[tuple[int, Any]] = [(900_001, None), (900_002, ""), (900_003, "  \t ")]
LINEAGE = (
    "model_name",
    "model_version",
    "input_fingerprint",
    "code_version",
    "run_id",
    "shard_id",
    "scored_at",
)


def texts(n: int, seed: int = 0) -> list[str]:
    """``n`` real paragraphs: standard-library docstrings, shuffled deterministically and cycled."""
    pool = harvest_docstrings(3000)
    rng = random.Random(seed)
    return [pool[rng.randrange(len(pool))] + ("" if i < len(pool) else f" (copy {i})") for i in range(n)]


def make_docs(url: str, n: int, *, bad: bool = True, table: str = "docs") -> list[tuple[int, Any]]:
    """Create ``table(id, text)`` with ``n`` good rows (ids 0..n-1) and, optionally, the bad rows."""
    rows: list[tuple[int, Any]] = list(enumerate(texts(n)))
    if bad:
        rows += BAD_ROWS
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text(f"create table {table} (id bigint primary key, text text)"))
        conn.execute(
            sa.text(f"insert into {table} (id, text) values (:id, :text)"),
            [{"id": k, "text": t} for k, t in rows],
        )
    engine.dispose()
    return rows


def docs_spec(url: str, **fields: Any) -> Any:  # -> RunSpec
    """The tiny model over ``docs`` in ``url``, results in ``scores`` beside it; ``fields`` override."""

    defaults = {"model": "tiny", "source": url, "results": url, "results_table": "scores", "table": "docs"}
    return flat_spec(**{**defaults, **fields})


def execute(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(sa.text(sql), params or {})
            return [tuple(r) for r in result] if result.returns_rows else []
    finally:
        engine.dispose()


def parquet_bytes(ids: list[int], values: list[Any], row_group_size: int = 100) -> bytes:
    buffer = io.BytesIO()
    pl.DataFrame({"id": ids, "text": values}).write_parquet(buffer, row_group_size=row_group_size)
    return buffer.getvalue()


_WORDS = ["ledger", "prefix", "object", "footer", "range", "etag", "bucket", "stream", "column", "index"]


def sentence(i: int) -> str:
    """A short made-up text, the same for the same ``i``."""
    rng = random.Random(i)
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 14))) + f" #{i}"


def put_parquet(
    client: Any, bucket: str, key: str, ids: list[int], row_group_size: int = 50, compression: str = "none"
) -> None:
    """Upload a Parquet object ``(id, text)`` of ``ids`` (texts from :func:`sentence`) to S3."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(ids, pa.int64()), "text": [sentence(i) for i in ids]})
    buffer = io.BytesIO()
    pq.write_table(table, buffer, row_group_size=row_group_size, compression=compression)
    client.put_object(Bucket=bucket, Key=key, Body=buffer.getvalue())


def synthetic_docs(url: str, rows: int, table: str = "docs") -> None:
    """Rows generated inside PostgreSQL: varied lengths, a few bad ones, nothing shipped."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                f"create table {table} as select i::bigint as id, "
                "case when i % 997 = 0 then null else 'row ' || i || ' ' || "
                "repeat('shard batch merge lineage ', 1 + ((i::bigint * 7919) % 23)::int) end as text "
                "from generate_series(1, :n) as i"
            ),
            {"n": rows},
        )
        conn.execute(sa.text(f"alter table {table} add primary key (id)"))
    engine.dispose()


def checksum(url: str, table: str) -> tuple[int, str]:
    """Rows, and an MD5 over every (source_key, embedding) in key order."""
    rows = execute(
        url,
        f"select count(*), md5(string_agg(source_key || ':' || embedding::text, ',' order by source_key)) "
        f"from {table}",
    )
    return int(rows[0][0]), str(rows[0][1])


def slow_tiny_shards(monkeypatch: Any, forward_s: float, report_every_s: float) -> None:
    """Make each forward pass of the tiny model last ``forward_s`` longer, and shards report progress
    every ``report_every_s``: a shard then lasts long enough to be watched mid-way."""
    import time

    from shardwise.models.hf.encoders.tiny import TinyModel
    from shardwise.pipeline import shard

    real = TinyModel.run

    def slow(self, batch):  # type: ignore[no-untyped-def]
        time.sleep(forward_s)
        return real(self, batch)

    monkeypatch.setattr(TinyModel, "run", slow)
    monkeypatch.setattr(shard, "PROGRESS_EVERY_S", report_every_s)
