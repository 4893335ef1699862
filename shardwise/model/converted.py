"""Models converted once and kept on disk: a folder per entry, bounded in size, safe between processes.

A model whose file must be converted before it runs (a GGUF file, which
transformers de-quantises tensor by tensor on every load: on two CPU cores
most of a short run's start) is converted once into an entry of this cache
and later loads read the entry. An entry is a folder named for its key (a
digest of everything the conversion depends on: the source file's content
hash and the versions of the converting packages, chosen by the caller), so
a changed file or an upgrade makes another entry and a stale one is never
read.

Two processes may fill one entry at once: each converts into a temporary
folder beside the entries and renames it into place, an atomic step, so a
reader sees a whole entry or none; an advisory lock per entry makes the
second process wait for the first and read its entry instead of converting
too. An entry's manifest (``entry.json``, written last) names its key and
every file with its size and SHA-256 digest: an entry whose manifest is
missing, unreadable, for another key, or whose files are missing, of another
size or (checked at its first use in each process, so a process hashes an
entry once) of another digest is corrupt, and is set aside and converted
again, never an error. A cache that cannot be written (a read-only home, a
full disk) keeps nothing: :meth:`ConvertedCache.entry` says so in one warning
per process and the caller converts without it. Each use touches the
entry; after a conversion the least recently used entries go until the
cache fits ``max_bytes`` (the newest always stays). :meth:`ConvertedCache.clear`
empties it.

Whoever runs the engine decides where the folder lives and its bound (the
command line uses ``~/.shardwise/converted``); the engine takes the path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from shardwise.errors import ConfigError

__all__ = ["DEFAULT_MAX_BYTES", "ConvertedCache", "Entry", "KeepsConverted", "kept_in"]

DEFAULT_MAX_BYTES = 8 * 2**30
_MANIFEST = "entry.json"
_USED = ".used"
_FORMAT = 2
"""2: with each file's digest (entries of format 1 are converted again)."""
_log = logging.getLogger(__name__)
_CHECKED: set[tuple[str, int, int]] = set()
"""The entries whose files this process has hashed (or written): folder, manifest inode and mtime."""
_WARNED: set[Path] = set()
"""The caches this process has warned it cannot write."""
_STALE_S = 24 * 3600
"""A temporary or set-aside folder this old was left by a process that died: removed at the next trim."""


@runtime_checkable
class KeepsConverted(Protocol):
    """A model spec that can keep its converted model in a :class:`ConvertedCache` (a GGUF file's)."""

    def keeping(self, cache: ConvertedCache) -> Any:
        """The same spec, converting into ``cache`` once and loading from there."""
        ...


@dataclass(frozen=True)
class Entry:
    """One kept conversion: its folder, what it was converted from, its size and when it was last used."""

    path: Path
    kind: str
    key: Mapping[str, str]
    bytes: int
    last_used: float


@dataclass(frozen=True)
class ConvertedCache:
    """Converted models in folders under ``root``, at most ``max_bytes`` in all (see the module docstring)."""

    root: Path
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_bytes < 1:
            raise ConfigError(
                f"the converted-model cache's bound must be at least 1 byte, got {self.max_bytes}; "
                "give a positive size"
            )

    def entry(self, kind: str, key: Mapping[str, str], convert: Callable[[Path], None]) -> Path | None:
        """The folder of the entry for ``key``, converting into it with ``convert(folder)`` when it is
        missing or corrupt; None, with a warning, when the cache cannot be written (a read-only home, a
        full disk: the caller converts each time)."""
        name = f"{kind}-{_digest(kind, key)}"
        path = self.root / name
        found = self._valid(path, kind, key)
        if found is None:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                lock = open(self.root / f".{name}.lock", "a")  # noqa: SIM115 - held until the entry exists
            except OSError as exc:
                self._unwritable(exc)
                return None
            with lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then reads the first's entry
                found = self._valid(path, kind, key)
                if found is None:
                    self._set_aside(path)
                    failed = self._convert(path, kind, key, convert)
                    if failed is not None:
                        self._unwritable(failed)
                        return None
        _touch(path)
        self._trim(keep=path)
        return path

    def entries(self) -> list[Entry]:
        """Every whole entry, least recently used first."""
        found = []
        for path in self._folders():
            manifest = _manifest(path)
            if manifest is not None and _files_whole(path, manifest):
                used = _mtime(path / _USED) or _mtime(path / _MANIFEST) or 0.0
                size = sum(manifest["files"].values())
                found.append(Entry(path, manifest["kind"], manifest["key"], size, used))
        return sorted(found, key=lambda e: e.last_used)

    def clear(self) -> int:
        """Remove every entry (and anything left half-written); the bytes freed."""
        freed = 0
        for path in [*self._folders(), *self._leftovers()]:
            with contextlib.suppress(OSError):
                freed += _size(path)
            shutil.rmtree(path, ignore_errors=True)
        for lock in self.root.glob(".*.lock"):
            with contextlib.suppress(OSError):
                lock.unlink()
        return freed

    def _valid(self, path: Path, kind: str, key: Mapping[str, str]) -> Path | None:
        manifest = _manifest(path)
        if manifest is None or manifest["kind"] != kind or manifest["key"] != dict(key):
            return None
        if not _files_whole(path, manifest):
            return None
        checked = _checked_as(path)
        if checked not in _CHECKED:  # a same-size corruption: hashed once per process, at first use
            if not all(_sha256(path / name) == digest for name, digest in manifest["digests"].items()):
                return None
            _CHECKED.add(checked)
        return path

    def _convert(
        self, path: Path, kind: str, key: Mapping[str, str], convert: Callable[[Path], None]
    ) -> OSError | None:
        """Convert into a new entry at ``path``; None once it is there, else why it could not be written."""
        try:
            temp = Path(tempfile.mkdtemp(dir=self.root, prefix=f".tmp-{path.name}-"))
        except OSError as exc:
            return exc
        try:
            convert(temp)
            written = [f for f in sorted(temp.rglob("*")) if f.is_file()]
            files = {str(f.relative_to(temp)): f.stat().st_size for f in written}
            digests = {str(f.relative_to(temp)): _sha256(f) for f in written}
            manifest = {"format": _FORMAT, "kind": kind, "key": dict(key), "files": files, "digests": digests}
            (temp / _MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
            os.rename(temp, path)  # atomic: readers see the whole entry or none
        except OSError as exc:
            shutil.rmtree(temp, ignore_errors=True)
            return None if self._valid(path, kind, key) is not None else exc  # another process won?
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        _CHECKED.add(_checked_as(path))  # hashed as it was written
        return None

    def _unwritable(self, exc: OSError) -> None:
        """Warn, once a process, that nothing can be kept here (the caller converts each time)."""
        if self.root not in _WARNED:
            _WARNED.add(self.root)
            _log.warning(
                "cannot keep converted models in %s (%s): each load converts the model again until "
                "there is room; free disk space there",
                self.root,
                exc,
            )

    def _set_aside(self, path: Path) -> None:
        """Move a corrupt entry out of the way (atomically) and remove it."""
        if not path.exists():
            return
        aside = path.with_name(f".old-{path.name}-{os.getpid()}-{time.time_ns()}")
        with contextlib.suppress(OSError):
            os.rename(path, aside)
            shutil.rmtree(aside, ignore_errors=True)

    def _trim(self, keep: Path) -> None:
        """Remove the least recently used entries until the rest fit; ``keep`` stays whatever its size."""
        now = time.time()
        for leftover in self._leftovers():
            if now - (_mtime(leftover) or now) > _STALE_S:
                shutil.rmtree(leftover, ignore_errors=True)
        entries = self.entries()
        total = sum(e.bytes for e in entries)
        for entry in entries:
            if total <= self.max_bytes:
                break
            if entry.path != keep:
                self._set_aside(entry.path)
                total -= entry.bytes

    def _folders(self) -> Iterator[Path]:
        with contextlib.suppress(OSError):
            yield from (p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def _leftovers(self) -> Iterator[Path]:
        with contextlib.suppress(OSError):
            yield from (
                p for p in self.root.iterdir() if p.is_dir() and p.name.startswith((".tmp-", ".old-"))
            )


def kept_in(spec: Any, cache: ConvertedCache | None) -> Any:
    """``spec`` keeping its conversion in ``cache`` when it converts (:class:`KeepsConverted`), else as is."""
    return spec.keeping(cache) if cache is not None and isinstance(spec, KeepsConverted) else spec


def _digest(kind: str, key: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps([kind, dict(key)], sort_keys=True).encode()).hexdigest()[:32]


def _manifest(path: Path) -> dict[str, Any] | None:
    try:
        found = json.loads((path / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(found, dict) or found.get("format") != _FORMAT:
        return None
    files = found.get("files")
    if (
        not isinstance(files, dict)
        or not isinstance(found.get("key"), dict)
        or not isinstance(found.get("kind"), str)
    ):
        return None
    if not all(isinstance(size, int) for size in files.values()):
        return None
    digests = found.get("digests")
    if not isinstance(digests, dict) or digests.keys() != files.keys():
        return None
    return found


def _checked_as(path: Path) -> tuple[str, int, int]:
    """What identifies an entry's files as hashed: a converted-again entry has a new manifest."""
    try:
        stat = (path / _MANIFEST).stat()
    except OSError:
        return (str(path), -1, -1)
    return (str(path), stat.st_ino, stat.st_mtime_ns)


def _files_whole(path: Path, manifest: Mapping[str, Any]) -> bool:
    for name, size in manifest["files"].items():
        try:
            if (path / name).stat().st_size != size:
                return False
        except OSError:
            return False
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(2**20):
            digest.update(chunk)
    return digest.hexdigest()


def _touch(path: Path) -> None:
    with contextlib.suppress(OSError):
        (path / _USED).touch()


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
