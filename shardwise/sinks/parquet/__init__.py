"""Results as Parquet files, locally or on S3: :mod:`.sink` writes one file per chunk, visible once
listed in the table's manifest, and :mod:`.leftovers` tidies what a killed writer left.

:mod:`.kind` is the registry entry.
"""

from __future__ import annotations

from shardwise.sinks.parquet.kind import KIND, ParquetKind

__all__ = ["KIND", "ParquetKind"]
