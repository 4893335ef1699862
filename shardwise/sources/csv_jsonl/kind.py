"""The ``csv`` source kind: CSV and JSON Lines files (``.csv``, ``.jsonl``, ``.ndjson``), read by pyarrow."""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import ConfigError
from shardwise.sources.base import Source
from shardwise.sources.csv_jsonl.parse import SUFFIXES
from shardwise.sources.files.kind import FileKind
from shardwise.sources.registry import SourceKindOptions, SourceOptions, refuse_table

__all__ = ["KIND", "CsvJsonlKind"]


@dataclass(frozen=True)
class CsvJsonlKind(FileKind):
    """Opens :class:`~shardwise.sources.csv_jsonl.source.CsvJsonlSource`, with a Parquet source's options."""

    name: str = "csv"
    label: str = "CSV and JSON Lines files"
    suffixes: tuple[str, ...] = SUFFIXES

    def open(self, location: str, options: SourceOptions, own: SourceKindOptions) -> Source:
        from shardwise.sources.csv_jsonl.source import CsvJsonlSource

        refuse_table(options, "a CSV or JSON Lines source")
        if options.image_column is not None:
            raise ConfigError(
                f"image_column {options.image_column!r} reads pictures from Parquet files or a database; "
                "a CSV or JSON Lines source reads text: drop --image-column"
            )
        return CsvJsonlSource(
            location,
            options.key,
            options.text_column,
            input_columns=options.input_columns,
            **options.keywords(),
        )


KIND = CsvJsonlKind()
