"""The source contract: what every source kind must do (:mod:`shardwise.sources.base`), as checks on any kind.

Each check takes a :class:`SourceSample`: a kind's name and a writer that
adds rows (``{key: text}``) at a place and says where they are (a
:class:`SourcePlace`). Writing twice adds rows: another file for a file
kind, more rows of the table for a database. The checks, in
:data:`SOURCE_CHECKS`, raise :class:`ContractBroken` naming the guarantee:

- ``deterministic plans``: planning twice gives the same plan; every row is read once, in the same order
  every time, by a fresh source reading the stored plan too; a resumed read starts where it was told;
- ``only-new``: a source of rows reads back the current rows of the keys asked (absent keys are not
  yielded); a source planned by its files leaves out the files a completed run saw, and plans new ones;
- ``bad rows``: a row whose text is null, empty or blank is read under its key, once (the model makes it a
  dead letter): neither dropped nor breaking the read.

``python -m shardwise.testing source KIND`` writes its samples by what the kind claims: an SQLite table
for a kind of the ``sqlite`` scheme, ``.parquet``, ``.jsonl`` or ``.csv`` files for a kind of those
suffixes, a ``.png`` picture per row (its text in the file) for a kind of whole image files. A kind of
another format runs the checks from its own tests, with a writer of its own.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import sqlite3
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardwise.errors import ConfigError
from shardwise.sources import open_source, plan_objects
from shardwise.sources.base import NewOnly, ReadFrom, Source, SourcePlan
from shardwise.sources.registry import source_kind
from shardwise.testing.broken import expect

__all__ = ["SOURCE_CHECKS", "SourcePlace", "SourceSample", "sample_for"]

Rows = Mapping[int, "str | None"]


@dataclass(frozen=True)
class SourcePlace:
    """Where a sample's rows are: a location (a folder, a database URL) and, for a database, its table."""

    kind: str
    location: str
    table: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def open(self) -> Source:
        """The source of the kind at this place, opened by name as a worker opens a plan's source."""
        return open_source(self.location, table=self.table, kind=self.kind, kind_options=dict(self.options))


@dataclass(frozen=True)
class SourceSample:
    """A kind's name and ``write(rows)``, which adds ``{key: text}`` rows at one place and gives it.

    ``key(k)`` is the key row ``k`` is read under (itself, or a file's name for a kind of whole files);
    ``decode(value)`` the text a value read holds (itself for a text; None where there is none).
    """

    kind: str
    write: Callable[[Rows], SourcePlace]
    key: Callable[[int], Any] = lambda k: k
    decode: Callable[[Any], Any] = lambda value: value


def check_deterministic_plans(sample: SourceSample, rows: int = 30, shards: int = 3) -> None:
    what = "deterministic plans"
    texts = {k * k: f"text number {k}, {'long ' * (k % 5)}" for k in range(rows)}  # keys with gaps
    place = sample.write(texts)
    with place.open() as source:
        source.check()
        plan = source.plan(shards=shards)
        again = source.plan(shards=shards)  # its snapshot may differ: it names the state each one read
        same = again.shards == plan.shards and again.params == plan.params
        expect(same, what, "planning the same rows twice gave other shards")
        read = _read(source, plan)
        keys = [key for key, _ in read]
        wanted = {sample.key(k): text for k, text in texts.items()}
        expect(sorted(keys) == sorted(wanted), what, f"the plan's shards read keys {_short(keys)}")
        found = {key: sample.decode(value) for key, value in read}
        expect(found == wanted, what, "the values read are not the texts written")
        expect(_read(source, plan) == read, what, "reading the plan twice gave other rows or another order")
        shard = max(plan.shards, key=lambda s: s.expected_rows)
        whole = list(source.read(plan, shard))
        if len(whole) > 1:
            with source.open_reader(plan, shard, ReadFrom(rows=1, key=whole[0].key)) as reader:
                resumed = list(reader.rows)
            expect(resumed == whole[1:], what, "a read resumed after its first row did not give the rest")
    with place.open() as fresh:
        other = fresh.plan(shards=shards)
        same = other.shards == plan.shards and other.params == plan.params
        expect(same, what, "a fresh source of the same rows planned other shards")
        stored = SourcePlan.from_json(plan.to_json())
        expect(_read(fresh, stored) == read, what, "a fresh source reading the stored plan gave other rows")


def check_only_new(sample: SourceSample) -> None:
    what = "only-new"
    place = sample.write({k: f"text {k}" for k in range(10)})
    with place.open() as source:
        plan = source.plan()
        if not source.plans_by_objects:
            asked = [sample.key(3), sample.key(7), sample.key(999)]
            found = sorted((row.key, sample.decode(row.value)) for row in source.read_keys(asked))
            wanted = [(sample.key(3), "text 3"), (sample.key(7), "text 7")]
            expect(found == wanted, what, f"read_keys({asked}) gave {found}")
            return
        seen = frozenset(plan_objects(plan))
        skipped = source.plan(new_only=NewOnly("v1", "res", seen))
        left = len(skipped.shards)
        expect(left == 0, what, f"a plan leaving out the files a run saw has {left} shards")
    sample.write({k: f"text {k}" for k in range(10, 15)})
    with place.open() as source:
        fresh = source.plan(new_only=NewOnly("v1", "res", seen))
        keys = sorted(key for key, _ in _read(source, fresh))
        wanted = sorted(sample.key(k) for k in range(10, 15))
        expect(keys == wanted, what, f"after new rows came, only-new reads keys {_short(keys)}")


def check_bad_rows(sample: SourceSample) -> None:
    what = "bad rows"
    bad: dict[int, str | None] = {100: None, 101: "", 102: "  \t "}
    place = sample.write({**{k: f"text {k}" for k in range(5)}, **bad})
    with place.open() as source:
        plan = source.plan()
        read = _read(source, plan)
    keys = sorted(key for key, _ in read)
    wanted = sorted(sample.key(k) for k in [*range(5), *bad])
    expect(keys == wanted, what, f"rows with a null, empty or blank text: keys read {keys}")
    written = {sample.key(k): text for k, text in bad.items()}
    for key, value in read:
        if key in written:
            text = value if isinstance(value, Exception) else sample.decode(value)
            blank = isinstance(text, str) and not text.strip()
            ok = text is None or isinstance(text, Exception) or blank
            expect(ok, what, f"key {key}'s text {written[key]!r} was read as {value!r}")


SOURCE_CHECKS: dict[str, Callable[[SourceSample], None]] = {
    "deterministic plans": check_deterministic_plans,
    "only-new": check_only_new,
    "bad rows": check_bad_rows,
}
"""Every check of the source contract, by the guarantee it checks."""


def sample_for(kind: str, folder: Path) -> SourceSample:
    """A sample of ``kind`` in the empty ``folder``, written in a format the kind claims; a kind of none
    of them is refused (run the checks from its tests, with a writer of its own)."""
    found = source_kind(kind)
    data = folder / "data"
    if "sqlite" in found.schemes:
        return SourceSample(kind, functools.partial(_sqlite, kind, folder / "source.db"))
    for suffix, writer in _FILE_WRITERS.items():
        if suffix in found.suffixes:
            return SourceSample(kind, functools.partial(_file, kind, data, suffix, writer))
    if ".png" in found.suffixes and found.whole_files:
        write = functools.partial(_file_per_row, kind, data)
        return SourceSample(kind, write, key=lambda k: f"{k}.png", decode=_png_text)
    claims = ", ".join([*(f"{s}://" for s in found.schemes), *found.suffixes])
    raise ConfigError(
        f"source kind {kind!r} reads {claims}, and the contract writes samples as SQLite tables, .parquet, "
        ".jsonl or .csv files, or folders of .png files only; run its checks from your tests with a "
        "SourceSample of your own"
    )


def _sqlite(kind: str, path: Path, rows: Rows) -> SourcePlace:
    with sqlite3.connect(path) as db:
        db.execute("create table if not exists docs (id integer primary key, text text)")
        db.executemany("insert into docs values (?, ?)", list(rows.items()))
    db.close()
    return SourcePlace(kind, f"sqlite:///{path}", table="docs")


def _file(
    kind: str, data: Path, suffix: str, writer: Callable[[Path, Rows], None], rows: Rows
) -> SourcePlace:
    data.mkdir(parents=True, exist_ok=True)
    writer(data / f"part-{uuid.uuid4().hex[:8]}{suffix}", rows)
    return SourcePlace(kind, str(data))


def _file_per_row(kind: str, data: Path, rows: Rows) -> SourcePlace:
    """A PNG picture per row, ``KEY.png``, its text in a tEXt chunk; an empty file for a null text."""
    from PIL import Image, PngImagePlugin

    data.mkdir(parents=True, exist_ok=True)
    for key, text in rows.items():
        if text is None:
            (data / f"{key}.png").write_bytes(b"")
            continue
        info = PngImagePlugin.PngInfo()
        info.add_text("text", text)
        Image.new("RGB", (4 + len(text) % 7, 4), (key % 256, 0, 0)).save(data / f"{key}.png", pnginfo=info)
    return SourcePlace(kind, str(data))


def _png_text(value: Any) -> str | None:
    """The text a picture of :func:`_file_per_row` holds; None for no bytes."""
    from PIL import Image

    data = getattr(value, "data", None)
    if not data:
        return None
    with Image.open(io.BytesIO(data)) as picture:
        return str(picture.info["text"])


def _parquet(path: Path, rows: Rows) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {"id": pa.array(list(rows), pa.int64()), "text": pa.array(list(rows.values()), pa.string())}
    )
    pq.write_table(table, path)


def _jsonl(path: Path, rows: Rows) -> None:
    path.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in rows.items()))


def _csv(path: Path, rows: Rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text"])
        writer.writerows([k, "" if v is None else v] for k, v in rows.items())


_FILE_WRITERS: dict[str, Callable[[Path, Rows], None]] = {
    ".parquet": _parquet,
    ".jsonl": _jsonl,
    ".csv": _csv,
}


def _read(source: Source, plan: SourcePlan) -> list[tuple[Any, Any]]:
    return [(row.key, row.value) for shard in plan.shards for row in source.read(plan, shard)]


def _short(values: list[Any]) -> str:
    return repr(values) if len(values) <= 8 else f"{values[:3]!r} ... {values[-3:]!r} ({len(values)})"
