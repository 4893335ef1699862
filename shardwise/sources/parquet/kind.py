"""The ``parquet`` source kind: Parquet files in a local folder, glob or file, or an ``s3://`` prefix."""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.sources.base import Source
from shardwise.sources.files.kind import FileKind
from shardwise.sources.registry import SourceKindOptions, SourceOptions, refuse_table

__all__ = ["KIND", "ParquetKind"]


@dataclass(frozen=True)
class ParquetKind(FileKind):
    """Opens :class:`~shardwise.sources.parquet.source.ParquetSource`; ``--image-column`` reads pictures."""

    name: str = "parquet"
    label: str = "Parquet files"
    suffixes: tuple[str, ...] = (".parquet",)

    def open(self, location: str, options: SourceOptions, own: SourceKindOptions) -> Source:
        from shardwise.sources.parquet.source import ParquetSource

        refuse_table(options, "a Parquet source")
        return ParquetSource(
            location, options.key, options.text_column, input_columns=options.input_columns,
            image_column=options.image_column, image_access=options.image_access, **options.keywords(),
        )  # fmt: skip


KIND = ParquetKind()
