"""The ``images`` source kind: a folder, glob or ``s3://`` prefix of image files, one row per image."""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import ConfigError
from shardwise.sources.base import Source
from shardwise.sources.files.kind import FileKind
from shardwise.sources.images.suffixes import IMAGE_SUFFIXES
from shardwise.sources.registry import SourceKindOptions, SourceOptions, refuse_table

__all__ = ["KIND", "ImagesKind"]


@dataclass(frozen=True)
class ImagesKind(FileKind):
    """Opens :class:`~shardwise.sources.images.folder.ImageFolderSource`: rows keyed by relative path."""

    name: str = "images"
    label: str = "image files"
    suffixes: tuple[str, ...] = IMAGE_SUFFIXES
    whole_files: bool = True

    def open(self, location: str, options: SourceOptions, own: SourceKindOptions) -> Source:
        from shardwise.sources.images.folder import ImageFolderSource

        refuse_table(options, "an image folder")
        if options.reads_columns:
            raise ConfigError(
                f"{location!r} is a folder of images: each row is one image keyed by its path in the folder, "
                "so it takes no --key, --text-column or input columns; drop them"
            )
        return ImageFolderSource(
            location, s3_client=options.s3_client, retry=options.retry, access=options.image_access
        )


KIND = ImagesKind()
