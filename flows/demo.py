"""``shardwise demo``: build a small input from harvested text, score it, and say where the results are."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from models import get_spec
from shardwise import Engine, resolve_device
from shardwise.corpus import harvest_docstrings

__all__ = ["run_demo"]


def run_demo(workdir: Path, model_name: str, rows: int, device: str) -> Path:
    """Write ``docs.parquet`` under ``workdir``, score it, write ``results.parquet``; return its path."""
    workdir.mkdir(parents=True, exist_ok=True)
    texts = harvest_docstrings(rows)
    source = workdir / "docs.parquet"
    pl.DataFrame({"id": range(len(texts)), "text": texts}).write_parquet(source)
    print(f"input: {len(texts)} docstring paragraphs from the standard library -> {source}")

    model = get_spec(model_name).load(resolve_device(device))
    frame = pl.read_parquet(source)
    run = Engine(model).run(zip(frame["id"], frame["text"], strict=True))
    results = list(run)
    out = workdir / "results.parquet"
    pl.DataFrame(
        {
            "id": [r.key for r in results],
            "embedding": [r.values["embedding"].tolist() if r.values else None for r in results],
            "truncated": [r.truncated for r in results],
            "error": [None if r.ok else str(r.error) for r in results],
            "model_version": model.version,
        }
    ).write_parquet(out)
    stats = run.stats
    print(
        f"scored {stats.rows - stats.rows_failed}/{stats.rows} rows with {model.name} on {model.device}: "
        f"{stats.rows_per_s:.0f} rows/s, padding efficiency {stats.padding_efficiency:.3f}"
    )
    print(f"results: {out}")
    return out
