"""A generator's tokens in what a run tells: tokens/s in its progress, prompt and completion totals in its
summary and artifacts, equal to the sums of the results table's own token columns.

The totals are the whole run's (every committed chunk, whichever attempt or
invocation scored it), so they must still equal the table's sums after a
shard retried mid-way and after a failed run is resumed. An encoder declares
no count outputs and shows nothing about tokens.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from flow_data import BAD_ROWS, execute, make_docs
from hf_builders import tiny_causal_lm

from shardwise.errors import TransientError
from shardwise.flows.cli import main
from shardwise.flows.params import ScoreParams
from shardwise.flows.score import score
from shardwise.pipeline.run_result import RunResult

pytestmark = [pytest.mark.usefixtures("prefect_harness")]
pytest.importorskip("transformers")

ROWS = 24
TABLE = "generated"
TOTALS = f"select sum(completion_tokens), sum(prompt_tokens), count(*) from {TABLE}"


@pytest.fixture(scope="module")
def lm(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("lm"), context=4096)


def _artifacts(flow_run_id: str) -> dict[str, Any]:
    """The flow run's artifacts' data by key, and the progress artifact's description."""
    from prefect import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def read() -> dict[str, Any]:
        async with get_client() as client:
            found = await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id]))
            )
            data = {a.key: a.data for a in found}
            return {**data, "progress": next(a.description for a in found if a.key == "shardwise-progress")}

    return asyncio.run(read())


def _shard_rows(artifacts: dict[str, Any]) -> list[dict[str, Any]]:
    table = artifacts["shardwise-shards"]
    return table if isinstance(table, list) else json.loads(table)


def _cli(url: str, model: str, *extra: str) -> list[str]:
    return [
        "run", "--source", url, "--table", "docs", "--model", model, "--results-table", TABLE,
        "--precision", "fp32", "--shards", "2", "--progress", "lines", "--progress-every", "0.2", *extra,
    ]  # fmt: skip


def test_a_cli_generation_run_shows_tokens_per_s_and_the_tables_token_sums(
    sqlite_url: str, lm: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    code = main(_cli(sqlite_url, str(lm), "--max-new-tokens", "6", "--chat", "off"))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    ((completion, prompt, rows),) = execute(sqlite_url, TOTALS)
    assert rows == ROWS and completion > 0 and prompt > completion

    assert f"whole run, resumes included: {completion:,} completion tokens, {prompt:,} prompt tokens" in out
    progress = [line for line in err.splitlines() if line.startswith("progress: ")]
    final = re.fullmatch(
        r"progress: 2/2 shards, (\d+)/\1 rows, [\d,]+ rows/s, ([\d,]+) completion tokens/s, "
        r"([\d,]+) prompt tokens/s, took \d+ s, 3 dead letters",
        progress[-1],
    )
    assert final, progress
    assert int(final[2].replace(",", "")) > 0 and int(final[3].replace(",", "")) > 0

    ((run_id,),) = execute(sqlite_url, "select run_id from shardwise_runs")
    artifacts = _artifacts(run_id)
    markdown = artifacts["shardwise-run"]
    assert f"| Completion tokens, whole run | {completion} |" in markdown
    assert f"| Prompt tokens, whole run | {prompt} |" in markdown
    shards = _shard_rows(artifacts)
    assert sum(r["completion_tokens"] for r in shards) == completion
    assert sum(r["prompt_tokens"] for r in shards) == prompt
    assert "completion tokens/s" in artifacts["progress"], "the flow's progress says what the CLI's does"


def test_an_encoder_run_shows_nothing_about_tokens(
    sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    make_docs(sqlite_url, ROWS)
    assert main(_cli(sqlite_url, "tiny")) == 0
    out, err = capsys.readouterr()
    assert "whole run" not in out and "tokens" not in err, (out, err)
    ((run_id,),) = execute(sqlite_url, "select run_id from shardwise_runs")
    artifacts = _artifacts(run_id)
    assert "whole run" not in artifacts["shardwise-run"] and "tokens" not in artifacts["progress"]
    assert not any("tokens" in key for row in _shard_rows(artifacts) for key in row if key != "tokens_per_s")


def test_live_progress_counts_the_tokens_of_each_finished_batch(
    sqlite_url: str, lm: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batches of a few rows, each a little slow: the shard reports its tokens as they are generated,
    and the flow's readings show tokens/s mid-way, ending at the table's sums."""
    from shardwise.models.hf.causal.model import HFGenerator
    from shardwise.pipeline import ProgressReading, shard
    from shardwise.results import Ledger
    from shardwise.tasks import progress
    from shardwise.tasks.progress import listening

    make_docs(sqlite_url, ROWS)
    real_run, real_record = HFGenerator.run, Ledger.record_progress
    reported: list[dict[str, int]] = []

    def slow(self: Any, batch: Any) -> Any:
        time.sleep(0.1)
        return real_run(self, batch)

    def recorded(self: Any, *args: Any) -> bool:
        reported.append(dict(args[-1]))
        return bool(real_record(self, *args))

    monkeypatch.setattr(HFGenerator, "run", slow)
    monkeypatch.setattr(Ledger, "record_progress", recorded)
    monkeypatch.setattr(shard, "PROGRESS_EVERY_S", 0.02)
    monkeypatch.setattr(progress, "POLL_EVERY_S", 0.05)
    seen: list[ProgressReading] = []
    with listening(seen.append):
        ok, summary = _generate(sqlite_url, lm, shards=1, max_tokens=400)
    assert ok, summary
    ((completion, prompt, _),) = execute(sqlite_url, TOTALS)
    generated = [r["completion_tokens"] for r in reported]
    assert any(0 < n < completion for n in generated), reported
    assert generated == sorted(generated), "a shard's tokens only grow"
    running = [s for s in seen if not s.final and 0 < s.counts.get("completion_tokens", 0) < completion]
    assert running and all(s.counts_per_s["completion_tokens"] > 0 for s in running), seen
    assert seen[-1].counts == {"completion_tokens": completion, "prompt_tokens": prompt}


def _generate(url: str, lm: Path, **run: Any) -> tuple[bool, RunResult]:
    """Generate from ``url``'s docs with ``lm`` into TABLE; ``run`` adds to the run section."""
    params = {
        "source": {"location": url, "table": "docs"},
        "model": {"name": str(lm), "generation": {"max_new_tokens": 6, "chat": "off"}},
        "results": {"table": TABLE},
        "run": {"precision": "fp32", "shards": 2, **run},
    }
    state = score(ScoreParams.model_validate(params), return_state=True)
    return state.is_completed(), state.result(raise_on_failure=False)


@pytest.mark.parametrize("database", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_totals_stay_the_tables_sums_across_a_retried_shard_and_a_resume(
    database: str, lm: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Shard 0 commits chunks of 4 rows and fails once after its first: its retry starts after that chunk.
    Shard 1 fails for good, so the run fails; the resume scores it. Both summaries count the whole run."""
    url = str(request.getfixturevalue("sqlite_url" if database == "sqlite" else "pg_url"))
    worker = importlib.import_module("shardwise.pipeline.worker")
    chunks = importlib.import_module("shardwise.pipeline.chunks")
    make_docs(url, ROWS)
    monkeypatch.setattr(worker, "ChunkConfig", lambda rows: chunks.ChunkConfig(4))
    real_commit, real_score = chunks._commit, worker.score_shard
    broke: list[int] = []

    def dropped(writer: Any, chunk: Any) -> bool:
        if writer.shard_id == 0 and chunk.number == 1 and not broke:
            broke.append(chunk.number)
            raise TransientError("connection reset by peer (simulated, after chunk 0 committed)")
        return bool(real_commit(writer, chunk))

    def shard_1_broken(**kwargs: Any) -> Any:
        if kwargs["shard"].shard_id == 1:
            kwargs["store"].ledger.record_attempt(kwargs["run"].run_id, 1)
            raise ValueError("model output had the wrong shape")
        return real_score(**kwargs)

    monkeypatch.setattr(chunks, "_commit", dropped)
    monkeypatch.setattr(worker, "score_shard", shard_1_broken)
    ok, first = _generate(url, lm)
    assert not ok and broke == [1] and first.totals.shards_failed == 1
    attempts = execute(url, "select attempt from shardwise_chunks where shard_id = 0 order by chunk")
    assert attempts[:2] == [(1,), (2,)], "the retry started after the chunk its first attempt committed"
    ((completion, prompt, rows),) = execute(url, TOTALS)
    assert 0 < rows < ROWS and first.totals.counts == {
        "completion_tokens": completion,
        "prompt_tokens": prompt,
    }

    monkeypatch.setattr(worker, "score_shard", real_score)
    ok, resumed = _generate(url, lm, resume=first.run_id)
    assert ok and resumed.run_id == first.run_id and resumed.shards.skipped == 1
    ((completion, prompt, rows),) = execute(url, TOTALS)
    assert rows == ROWS and resumed.totals.rows_failed == len(BAD_ROWS)
    assert resumed.totals.counts == {"completion_tokens": completion, "prompt_tokens": prompt}, (
        "the whole run"
    )
    assert resumed.totals.counts["prompt_tokens"] > first.totals.counts["prompt_tokens"]


def test_cached_tokens_are_said_with_their_share_of_the_prompt_tokens() -> None:
    """vLLM's prefix cache and a remote model's cached prompt tokens: their share is the hit rate."""
    from shardwise.model.counts import said

    assert said({"prompt_tokens": 400, "cached_tokens": 280, "completion_tokens": 96}) == [
        "280 cached tokens (70.0% of prompt tokens)",
        "96 completion tokens",
        "400 prompt tokens",
    ]
    assert said({"cached_tokens": 0}) == ["0 cached tokens"]  # no prompt tokens counted: no share


def test_the_artifact_gives_cached_tokens_their_share_too() -> None:
    from shardwise.tasks.artifacts import _count_rows

    rows = _count_rows({"prompt_tokens": 400, "cached_tokens": 280})
    assert rows == [
        "| Cached tokens, whole run | 280 (70.0% of prompt tokens) |",
        "| Prompt tokens, whole run | 400 |",
    ]
