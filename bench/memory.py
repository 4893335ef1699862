"""Memory per worker: ``shardwise run --runner process`` as a user starts it, its processes sampled over time.

    python bench/memory.py --rows 100000 300000 1000000
    python bench/memory.py --rows 100000 300000 --against main --json

For each size an SQLite table ``docs(id, text)`` is written (texts of varied
length, made up here: nothing is downloaded), and ``shardwise run --runner
process --workers 2 --model tiny`` runs on it as a subprocess, results to
SQLite, on Prefect's temporary server. A sampler thread reads, every
``--every`` seconds, the resident set (RSS) of the CLI process and of each of
its descendants, and the unique and proportional sets (USS, PSS: what the
process alone holds, and its share of what it shares), from ``/proc`` through
psutil. A descendant started by ``multiprocessing``'s spawn (``spawn_main``
on its command line) is a worker; Prefect's temporary server and the
resource tracker are shown apart.

It prints each size's peak RSS / USS / PSS of each worker and of the CLI,
the shard count and rows/s (whole run), and the growth of the largest worker's peak RSS
from the smallest size to the largest: with shards streamed in bounded
chunks it should stay near 1.0. With ``--against REV`` it runs ``shardwise
run`` from that git revision too (see ``bench/whole.py``), size by size, to
measure a change, and checks that both wrote identical results (a checksum
over key and output of every row). Ends with one JSON line with ``--json``. Memory figures do
not depend on the machine's load; the rows/s do. This prints figures; it is
not a timed test.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os

USER_ENVIRONMENT = dict(os.environ)
"""The environment as the user gave it, before bench/engine.py sets this tree's defaults: each
``shardwise run`` (this tree's or ``--against``'s) sets its own."""
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import Sampler
from bench.whole import tree_of

_WORDS = ("alpha", "beta", "gamma", "delta", "ledger", "shard", "window", "chunk", "merge", "plan")


def write_docs(path: Path, rows: int) -> None:
    """``docs(id, text)`` with ``rows`` made-up texts of 2 to 120 words, the same for the same id."""
    with sqlite3.connect(path) as db:
        db.execute("create table docs (id integer primary key, text text)")
        batch = 50_000
        for first in range(0, rows, batch):
            db.executemany(
                "insert into docs values (?, ?)",
                ((i, _text(i)) for i in range(first, min(rows, first + batch))),
            )


def _text(i: int) -> str:
    words = 2 + (i * 7919) % 119
    return f"row {i} " + " ".join(_WORDS[(i + k * 31) % len(_WORDS)] for k in range(words))


def one_run(
    rows: int, source: Path, work: Path, tag: str, pythonpath: Path | None, every: float
) -> dict[str, Any]:
    """One ``shardwise run`` on ``source``; its processes' peaks and its rows/s."""
    results = work / f"results-{tag}.db"
    env = {**USER_ENVIRONMENT, "PREFECT_HOME": str(work / f"prefect-{tag}")}
    env["SHARDWISE_HOME"] = str(work / "home")
    env.pop("PREFECT_API_URL", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    cli = str(Path(sys.executable).parent / "shardwise")
    command = [
        *(cli, "run", "--source", f"sqlite:///{source}", "--table", "docs", "--model", "tiny"),
        *("--runner", "process", "--workers", "2", "--results", f"sqlite:///{results}", "--progress", "none"),
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with Sampler(proc.pid, every) as sampler:
        out, _ = proc.communicate()
    wall = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"shardwise run ({tag}) failed:\n{out[-4000:]}")
    with sqlite3.connect(results) as db:
        shards, scored = db.execute("select count(*), sum(rows_out) from shardwise_shards").fetchone()
        digest = hashlib.md5()
        for key, vector in db.execute(
            "select source_key, embedding from shardwise_results order by source_key"
        ):
            digest.update(
                f"{key}:".encode() + (vector if isinstance(vector, bytes) else str(vector).encode())
            )
    workers = sampler.by_role("worker")
    return {
        "rows": rows,
        "rows_out": scored,
        "shards": shards,
        "wall_s": round(wall, 1),
        "rows_per_s": round(rows / wall, 1),
        "workers": [{k: round(v, 1) for k, v in w.items()} for w in workers],
        "worker_peak_rss_mib": round(max(w["rss"] for w in workers), 1) if workers else None,
        "cli": {k: round(v, 1) for k, v in sampler.by_role("cli")[0].items()},
        "server": [{k: round(v, 1) for k, v in p.items()} for p in sampler.by_role("server")],
        "samples": sampler.samples,
        "checksum": digest.hexdigest(),
    }


def report(label: str, run: dict[str, Any]) -> None:
    shown = "; ".join(f"RSS {w['rss']:.0f} USS {w['uss']:.0f} PSS {w['pss']:.0f}" for w in run["workers"])
    cli = run["cli"]
    print(
        f"{label:>12} {run['rows']:>8} rows, {run['shards']} shards, "
        f"{run['rows_per_s']:.0f} rows/s whole run: "
        f"workers' peak MiB [{shown}]; CLI RSS {cli['rss']:.0f} USS {cli['uss']:.0f} "
        f"({run['samples']} samples)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[100_000, 300_000, 1_000_000])
    parser.add_argument("--against", metavar="REV", help="also run shardwise from this git revision")
    parser.add_argument("--every", type=float, default=0.25, help="seconds between samples")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="shardwise-memory-"))
    result: dict[str, Any] = {"load_before": os.getloadavg(), "sizes": []}
    print(f"load average {', '.join(f'{x:.2f}' for x in result['load_before'])}")
    against = tree_of(args.against, work) if args.against else None
    for rows in args.rows:
        source = work / f"docs-{rows}.db"
        write_docs(source, rows)
        size = {"rows": rows, "this": one_run(rows, source, work, f"{rows}", None, args.every)}
        report("this tree", size["this"])
        if against is not None:
            size["against"] = one_run(rows, source, work, f"{rows}-against", against, args.every)
            report(args.against, size["against"])
            size["identical"] = size["this"]["checksum"] == size["against"]["checksum"]
            print(f"{'':>12} results identical to {args.against}'s: {size['identical']}")
        result["sizes"].append(size)
        source.unlink()
    for which in ("this", "against") if against is not None else ("this",):
        peaks = [s[which]["worker_peak_rss_mib"] for s in result["sizes"]]
        growth = peaks[-1] / peaks[0]
        result[f"growth_{which}"] = round(growth, 3)
        name = "this tree" if which == "this" else args.against
        print(
            f"{name}: largest worker's peak RSS {' -> '.join(f'{p:.0f}' for p in peaks)} MiB over "
            f"{' -> '.join(str(r) for r in args.rows)} rows, growth {growth:.2f}x"
        )
    result["load_after"] = os.getloadavg()
    print(f"load average after: {', '.join(f'{x:.2f}' for x in result['load_after'])}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
