"""What the kinds whose results go to a location share: a local directory or ``s3://bucket/prefix``.

The table lives at ``LOCATION/TABLE``; the ledger records it as
``KIND:LOCATION/TABLE`` (:func:`location_target`). A local location must be
a directory, or a path whose existing part is one, that this user may write in (:func:`check_local`).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from shardwise.errors import ConfigError
from shardwise.secrets.by_reference import is_reference
from shardwise.sinks.registry import Destination, SinkOptions
from shardwise.sources.files.stores import on_this_host

if TYPE_CHECKING:
    from shardwise.model import OutputColumn

__all__ = ["LocationKind", "check_local", "location_target", "require_packages"]


def location_target(kind: str, dest: Destination) -> str:
    """``KIND:LOCATION/TABLE``, what the ledger records as the run's results."""
    return f"{kind}:{dest.location}/{dest.table}"


def check_local(dest: Destination) -> None:
    """Local results go in a directory: ``LOCATION/TABLE`` and the default ledger beside it are made
    under the location, so it, and each of its parents that exists, must be a directory, and the nearest
    one that exists must be one this process may write in. Writing under a regular file, in a folder
    without permission, or on a read-only or virtual file system (``/proc``) fails the same way on every
    try: no retry can mend it, so it is refused before the run. S3 locations pass."""
    if not on_this_host(dest.location):
        return
    for path in (Path(dest.location) / dest.table, *Path(dest.location, dest.table).parents):
        if not os.path.lexists(path):
            continue
        # A location given as env:NAME is named so, never by its value (shardwise.secrets.by_reference).
        shown = repr(dest.given) if is_reference(dest.given) else f"{dest.given!r}: {str(path)!r}"
        if not os.path.isdir(path):
            raise ConfigError(
                f"results {shown} is not a directory (a regular file, or a link to none), so results cannot "
                "be written under it; give --results a directory, or a path whose existing part is a "
                "directory"
            )
        if not os.access(path, os.W_OK | os.X_OK):  # the kernel's own answer: permissions, ro mounts, /proc
            raise ConfigError(
                f"results {shown} is a directory this user cannot write in (no permission, or a read-only "
                "or virtual file system), so results cannot be written under it; give --results a "
                "directory you can write in"
            )
        return  # the nearest existing folder: what is under it is made as the run needs it


def require_packages(modules: tuple[str, ...], what: str, extra: str, instead: str) -> None:
    """Refuse ``what`` (``results in Delta Lake``) when a module of ``modules`` cannot be imported, naming
    its package, the extra that installs it, and the ``--results-format`` to give ``instead``."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ConfigError(
                f"{what} need the {module.partition('.')[0]} package ({exc}); pip install "
                f"'shardwise[{extra}]', or give --results-format {instead}"
            ) from exc


class LocationKind:
    """What a kind whose results go to a location does unless it says otherwise: no database scheme of its
    own, the target ``KIND:LOCATION/TABLE``, a local location checked to be a directory, every output kind
    stored, never the source's database, a local directory on this host only, and no folder marker. A
    kind subclasses it and gives ``name``, ``label``, ``extra``, ``options``, ``require()`` and
    ``open()``."""

    name: str
    schemes: tuple[str, ...] = ()

    def target(self, dest: Destination) -> str:
        return location_target(self.name, dest)

    def check(self, dest: Destination, options: SinkOptions) -> None:
        check_local(dest)

    def check_outputs(self, options: SinkOptions, model: str, outputs: tuple[OutputColumn, ...]) -> None:
        """A lake table stores every output kind."""

    def same_database(self, dest: Destination, url: str) -> bool:
        return False

    def on_this_host(self, dest: Destination) -> bool:
        return on_this_host(dest.location)

    def folder_marker(self) -> str | None:
        return None
