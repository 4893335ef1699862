"""``shardwise run`` generating text, SIGKILLed mid-shard: ``--resume`` is exact, on SQLite and PostgreSQL.

The run samples (temperature above 0, a seed) from a tiny random causal LM
(``tests/hf_builders.py``) and commits every :data:`CHUNK` rows, so that a
few dozen generated rows commit several chunks, as a big run of embeddings
does. The killed command runs under ``counted_cli.py`` (every forward pass's
row count appended to a file, scoring paced so that progress shows before
the shard ends) on the test harness's Prefect API; once its progress shows a
quarter of the rows it is SIGKILLed. The resume and an uninterrupted run go
through the same command line in this process, counted the same way. A
resume that leaves the sampling settings out is refused, naming the settings
the run was started with; the resume that gives them must generate exactly
the rows no chunk had committed, store every row and dead letter once, and
leave results equal to the uninterrupted run's, column for column.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.flows.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("prefect_harness", "one_torch_thread")]
pytest.importorskip("transformers")

ROWS = 64
CHUNK = 8
ROWS_PER_S = 12  # 5 s of generating: several progress reports (one a second) before the shard ends
COUNTED = Path(__file__).with_name("counted_cli.py")
COLUMNS = "source_key, generated_text, finish_reason, prompt_tokens, completion_tokens, input_fingerprint"
SAMPLING = ("--temperature", "0.9", "--top-p", "0.95", "--seed", "7")


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """What ``counted_cli.py`` does to the command it runs, for a command run in this process: each
    forward pass's row count, and a chunk every :data:`CHUNK` rows."""
    from shardwise.batch.engine import EngineRun
    from shardwise.pipeline import worker
    from shardwise.pipeline.chunks import ChunkConfig

    counts: list[int] = []
    score = EngineRun._score

    def counting(self: EngineRun, batch: object, *args: object) -> None:
        score(self, batch, *args)  # type: ignore[arg-type]
        counts.append(len(batch.positions))  # type: ignore[attr-defined]

    monkeypatch.setattr(EngineRun, "_score", counting)
    monkeypatch.setattr(worker, "ChunkConfig", lambda _rows: ChunkConfig(CHUNK))
    return counts


def _args(url: str, lm: Path, table: str, *extra: str, sampling: tuple[str, ...] = SAMPLING) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--results-table", table, "--model", str(lm),
        "--prompt", "Summarise: {text}", "--max-new-tokens", "6", *sampling,
        "--precision", "fp32", "--threads", "1", "--shards", "1", *extra,
    ]  # fmt: skip


def _kill_at_a_quarter(counts: Path, args: list[str]) -> int:
    """Run the command under counted_cli.py; SIGKILL it once its progress shows a quarter of the rows."""
    from prefect.settings import PREFECT_API_URL

    env = {**os.environ, "COUNTED_CHUNK_ROWS": str(CHUNK), "PREFECT_API_URL": str(PREFECT_API_URL.value())}
    argv = [sys.executable, str(COUNTED), str(counts), str(ROWS_PER_S), *args]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    shown = 0
    for line in proc.stderr:
        done = re.search(r"progress: 0/1 shard, ([\d,]+)/([\d,]+) rows", line)
        if done and 4 * int(done.group(1).replace(",", "")) >= int(done.group(2).replace(",", "")):
            shown = int(done.group(1).replace(",", ""))
            os.kill(proc.pid, signal.SIGKILL)
            break
    proc.wait()
    assert shown and proc.returncode == -signal.SIGKILL, "the run ended before it could be killed mid-shard"
    return shown


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_generation_run_killed_mid_shard_resumes_exactly(
    database: str,
    request: pytest.FixtureRequest,
    lm: Path,
    tmp_path: Path,
    counted: list[int],
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = request.getfixturevalue("sqlite_url" if database == "sqlite" else "pg_url")
    make_docs(url, ROWS)
    killed = tmp_path / "killed.counts"
    shown = _kill_at_a_quarter(
        killed, _args(url, lm, "resumed", "--lease-s", "2", "--progress", "lines", "--progress-every", "0.2")
    )
    generated = sum(int(n) for n in killed.read_text().split())
    ((run_id, status),) = execute(url, "select run_id, status from shardwise_runs")
    assert status == "running", "nobody could record the end: the run was killed"
    ((committed,),) = execute(url, "select count(*) from resumed")
    assert committed % CHUNK == 0 and CHUNK <= committed < ROWS, (shown, committed)
    time.sleep(2.5)  # its lease (--lease-s 2) runs out: the run is abandoned, and a resume may take it

    capsys.readouterr()
    greedy = ("--temperature", "0", "--top-p", "0.95", "--seed", "7")  # another version: refused, naming it
    assert main(_args(url, lm, "resumed", "--resume", run_id, sampling=greedy)) == 2
    refused = capsys.readouterr().err
    assert f"--temperature 0.0 differs from run {run_id!r}'s 0.9" in refused, refused
    assert not counted, "the refused resume generated nothing"
    assert main(_args(url, lm, "resumed", "--resume", run_id, "--progress", "none")) == 0
    regenerated = sum(counted)
    print(
        f"\nkilled when progress showed {shown}/{ROWS + len(BAD_ROWS)} rows; the model had generated "
        f"{generated}, {committed} were committed in chunks of {CHUNK}; the resume generated {regenerated}"
    )
    assert regenerated == ROWS - committed, "the resume generated rows that a chunk had committed"
    assert 0 <= generated - committed <= CHUNK, "more than one chunk was generated twice"

    assert main(_args(url, lm, "clean", "--progress", "none")) == 0
    query = f"select {COLUMNS} from {{}} order by source_key"
    resumed, reference = (execute(url, query.format(table)) for table in ("resumed", "clean"))
    assert len(resumed) == len({row[0] for row in resumed}) == ROWS
    differ = [a[0] for a, b in zip(resumed, reference, strict=True) if a != b]
    assert not differ, f"{len(differ)} rows differ from an uninterrupted run's, e.g. keys {differ[:5]}"
    assert len({row[1] for row in resumed}) > ROWS // 2, "sampling gave varied texts"
    letters = execute(url, "select source_key from shardwise_errors where run_id = :r", {"r": run_id})
    assert sorted(int(k) for (k,) in letters) == [k for k, _ in BAD_ROWS], "each dead letter once"
    ((rows_in, rows_out, status),) = execute(
        url, "select rows_in, rows_out, status from shardwise_runs where run_id = :r", {"r": run_id}
    )
    assert (rows_in, rows_out, status) == (ROWS + len(BAD_ROWS), ROWS, "completed")
