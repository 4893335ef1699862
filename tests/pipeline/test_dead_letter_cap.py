"""A run's dead letters in the results database quote no more of a row than 40 characters."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from flow_data import execute
from spec_builder import flat_spec

from shardwise.model.text import PREVIEW_CHARS

SECRET = "ssn 078-05-1120, card 4111-1111-1111-1111"


def test_a_struct_text_column_is_dead_lettered_without_copying_it(
    tmp_path: Path, sqlite_url: str, pipeline
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    documents = [{"title": f"document {k}", "body": "lorem ipsum " * 80, "private": SECRET} for k in range(4)]
    pq.write_table(pa.table({"id": pa.array(range(4), pa.int64()), "text": documents}), data / "p.parquet")
    spec = flat_spec(source=str(data), results=sqlite_url, results_table="scores", model="tiny")
    _, counts = pipeline.run(spec, "structs")
    assert (counts.rows_in, counts.rows_failed) == (4, 4)
    messages = [m for (m,) in execute(sqlite_url, "SELECT message FROM shardwise_errors")]
    assert len(messages) == 4
    for message in messages:
        assert "text must be a string, got dict" in message and "(dict of 3 items)" in message
        assert SECRET not in message and "lorem ipsum " * 4 not in message
        quoted = message.split("got dict ", 1)[1].split("... (", 1)[0]
        assert len(quoted) == PREVIEW_CHARS
