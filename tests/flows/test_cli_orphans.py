"""``shardwise run`` SIGKILLed while its local workers score: none of the processes it started outlives it.

The process pool's workers die with the command (``shardwise.process.lifeline``), a
local Dask cluster's workers by Dask's own watch on their nanny, a local
Ray's by Ray's fate sharing and the reaper (``shardwise.process.reaper``) for the
node's agents, and the temporary Prefect server by its guard.
"""

from __future__ import annotations

import pytest
from flow_data import make_docs
from kill_helpers import cli, kill_once_scoring, survivors

pytestmark = pytest.mark.slow

ROWS = 40_000  # two shards of 20,000: seconds of scoring each, several progress readings before either ends
WITHIN_S = 5.0
"""How long the processes of a killed run may take to end (the watcher polls twice a second)."""


def _killed(sqlite_url: str, runner: str, workers: str | tuple[str, ...]) -> list[str]:
    make_docs(sqlite_url, ROWS, bad=False)
    argv = cli(
        "run", "--source", sqlite_url, "--table", "docs", "--model", "tiny", "--shards", "2",
        "--runner", runner, "--workers", "2",
    )  # fmt: skip
    return survivors(kill_once_scoring(argv, workers=workers), WITHIN_S)


def test_a_killed_process_runner_run_leaves_no_worker(sqlite_url: str) -> None:
    assert _killed(sqlite_url, "process", workers="multiprocessing.spawn") == []


def test_a_killed_dask_runner_run_leaves_no_worker(sqlite_url: str, dask_extra: None) -> None:
    assert _killed(sqlite_url, "dask", workers=("multiprocessing.spawn", "dask worker")) == []


def test_a_killed_ray_runner_run_leaves_no_ray_process(sqlite_url: str, ray_extra: None) -> None:
    assert _killed(sqlite_url, "ray", workers="ray::") == []
