"""CSV and JSON Lines files as a source (the ``csv`` kind): a folder, glob or ``s3://`` prefix, the format
from each file's suffix, read by pyarrow; see :mod:`shardwise.sources.csv_jsonl.source`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from shardwise.lazy import lazy_exports

if TYPE_CHECKING:
    from shardwise.sources.csv_jsonl.kind import KIND, CsvJsonlKind
    from shardwise.sources.csv_jsonl.source import CsvJsonlSource

__all__ = ["KIND", "CsvJsonlKind", "CsvJsonlSource"]

__getattr__ = lazy_exports(__name__, {".kind": ("KIND", "CsvJsonlKind"), ".source": ("CsvJsonlSource",)})
