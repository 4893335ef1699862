"""A writer the kill -9 tests start and kill: commits chunks 0..N-1 of shard 0, printing each one.

Usage: ``python lake_child.py delta|parquet LOCATION TABLE CHUNKS``; S3 settings come from the
environment, as a worker's do.
"""

from __future__ import annotations

import sys

from lake_rows import LAYOUT, chunk

from shardwise.sinks.delta import DeltaSink
from shardwise.sinks.parquet_files import ParquetSink


def main() -> None:
    kind, location, table, chunks = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sink = (DeltaSink if kind == "delta" else ParquetSink)(location, table, LAYOUT)
    sink.ensure()
    print("ready", flush=True)
    for number in range(chunks):
        sink.commit(chunk(number))
        print("committed", number, flush=True)


if __name__ == "__main__":
    main()
