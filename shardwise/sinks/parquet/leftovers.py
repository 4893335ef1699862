"""What a killed Parquet-sink writer leaves behind, and when a later run may delete it.

A chunk's write takes three steps (:mod:`shardwise.sinks.parquet.sink`):
its data file is written under ``_tmp/`` and renamed (an S3 copy) into
``data/``; then its manifest entry is created (locally it too is written
under ``_tmp/`` first, then hard-linked to its name). A writer killed between
them leaves

* a temporary file under ``_tmp/``: a data file or a manifest entry never
  made visible, or
* a data file in ``data/`` that no manifest entry lists (readers never see it).

**Whose, and when it may go.** Two runs may write one table at once, and a
live writer's temporary file, or its data file in the instant before its
entry, looks exactly like a leftover. Age cannot tell them apart (a worker
paused by a long GC or a frozen VM is slow, not dead), so the judge is the
ledger, the one place that knows which runs are live. Every file a writer
makes names its run (the data file ``data/<run>-s<shard>-c<chunk>-<token>.parquet``,
a temporary file ``_tmp/<uuid>.<the name it becomes>``, see
:func:`~shardwise.sinks.lake_files.temp_name`), and a file is deleted only
when the ledger says its run is **over**: completed, failed or abandoned, and
no worker holds a live lease on one of its shards
(:meth:`~shardwise.results.Ledger.run_over`). A run the ledger does not know
(one recorded in another ledger that writes the same table) is left alone:
a run of that ledger tidies it. A temporary file that names no run (one an
older release wrote, or the schema file's) is deleted once it is
:data:`ORPHAN_AGE_S` old: writing one file never takes that long.

**Which data files are unlisted**, without reading every entry of a big
table: the entries are listed by name. A data file whose chunk has no entry
is unlisted; where a chunk has two files (two writers of it), or sits at its
shard's last entry (where a seal, which lists no file, may be), that one
entry is read to see which file it lists.

**The one case left to the writer**: a writer paused past its leases in the
instant between publishing its data file and creating its entry, whose run a
tidier judged over meanwhile. Once its entry lands it checks that its file is
there and, if a tidier removed it, publishes the same bytes under the same
name again (:meth:`~shardwise.sinks.parquet.sink.ParquetSink.commit`).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from shardwise.sinks.lake_files import TEMP_FOLDER, Files, temp_target

__all__ = ["ORPHAN_AGE_S", "Leftovers", "Over", "find_leftovers"]

ORPHAN_AGE_S = 3600.0
"""Seconds after which a temporary file that names no run is a leftover."""

Over = Callable[[str], "bool | None"]
"""Whether a run is over (no process of it writes any more); None when the ledger does not know it."""

_DATA = re.compile(r"data/(?P<run>[^/]+)-s(?P<shard>\d+)-c(?P<chunk>\d+)(?:-[0-9a-f]{12})?\.parquet")
_ENTRY = re.compile(r"_manifest/(?P<run>[^/]+)/s(?P<shard>\d+)-c(?P<chunk>\d+)\.json")
_Chunk = tuple[str, int, int]


@dataclass(frozen=True)
class Leftovers:
    """The files a tidy found: temporary files, and data files no manifest entry lists, of runs over."""

    temps: tuple[str, ...] = ()
    unlisted: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return self.unlisted + self.temps

    def lines(self, run: str | None = None) -> list[str]:
        """What deleting them did, a line per kind: of ``run`` (a run's own finish), or of the runs over,
        named at the end of each line."""
        kinds = ((self.unlisted, "data file(s) {of}that no manifest entry lists"),
                 (self.temps, "temporary file(s) {of}never made visible"))  # fmt: skip
        lines = []
        for names, what in kinds:
            if not names:
                continue
            line = f"deleted {len(names)} {what.format(of='' if run is None else f'of run {run} ')}"
            if run is None:
                owners = [_owner(name) for name in names]
                runs = sorted({found[0] for found in owners if found is not None})
                runs += ["files naming no run, an hour old"] if None in owners else []
                line += f", left by killed or finished writers ({', '.join(runs)})"
            lines.append(line)
        return lines


def find_leftovers(store: Files, over: Over, *, now: float, run: str | None = None) -> Leftovers:
    """The leftovers in ``store`` by the rules of the module docstring; only ``run``'s when given (a run's
    own finish: every shard of it is sealed). ``now`` is seconds since the epoch."""
    verdicts: dict[str, bool] = {}

    def gone(run_id: str) -> bool:
        if run_id not in verdicts:
            verdicts[run_id] = over(run_id) is True
        return verdicts[run_id]

    temps = []
    for name, changed in sorted(store.modified(TEMP_FOLDER).items()):
        owner = _owner(name)
        if owner is None:
            if run is None and now - changed > ORPHAN_AGE_S:
                temps.append(name)
        elif (run is None or owner[0] == run) and gone(owner[0]):
            temps.append(name)
    return Leftovers(tuple(temps), tuple(_unlisted(store, gone, run)))


def _unlisted(store: Files, gone: Callable[[str], bool], run: str | None) -> list[str]:
    """Data files of runs over that no manifest entry lists."""
    files: dict[_Chunk, list[str]] = defaultdict(list)
    for name in store.names("data", start="" if run is None else f"{run}-s"):
        key = _parse(_DATA, name)
        if key is not None and (run is None or key[0] == run):
            files[key].append(name)
    if not files:
        return []
    entries: dict[_Chunk, str] = {}
    last: dict[tuple[str, int], int] = {}
    for name in store.names("_manifest", start="" if run is None else f"{run}/"):
        key = _parse(_ENTRY, name)
        if key is not None:
            entries[key] = name
            last[key[:2]] = max(last.get(key[:2], -1), key[2])
    found: list[str] = []
    for key, names in sorted(files.items()):
        entry = entries.get(key)
        if entry is not None and len(names) == 1 and key[2] != last[key[:2]]:
            continue  # its chunk's entry lists the one file the chunk has
        if not gone(key[0]):
            continue
        if entry is None:
            found.extend(names)
            continue
        raw = store.get(entry)
        if raw is not None:
            listed = json.loads(raw).get("file")
            found.extend(name for name in names if name != listed)
    return found


def _owner(name: str) -> _Chunk | None:
    """(run, shard, chunk) a data file, a manifest entry or a temporary file of one belongs to; None for
    any other name (a temporary file of the schema, or of an older release)."""
    if name.startswith(f"{TEMP_FOLDER}/"):
        target = temp_target(name)
        return None if target is None else _owner(target)
    return _parse(_DATA, name) or _parse(_ENTRY, name)


def _parse(pattern: re.Pattern[str], name: str) -> _Chunk | None:
    found = pattern.fullmatch(name)
    return None if found is None else (found["run"], int(found["shard"]), int(found["chunk"]))
