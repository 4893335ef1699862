"""The terminal view of a run's progress: mode choice, and the plain lines a non-terminal gets."""

from __future__ import annotations

import io

import pytest

from shardwise.errors import ConfigError
from shardwise.flows.progress_view import pick_mode, progress_line, showing
from shardwise.pipeline import ProgressReading
from shardwise.tasks.progress import publish


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _snap(elapsed_s: float, rows_done: int, **kw: object) -> ProgressReading:
    fields: dict = {
        "run_id": "r",
        "shards_total": 10,
        "shards_done": rows_done // 2000,
        "shards_failed": 0,
        "rows_total": 20_000,
        "rows_done": rows_done,
        "dead_letters": 4,
        "elapsed_s": elapsed_s,
    }
    return ProgressReading(**{**fields, **kw})  # type: ignore[arg-type]


def test_auto_is_a_bar_on_a_terminal_and_lines_elsewhere() -> None:
    assert pick_mode("auto", _Terminal()) == "bar"
    assert pick_mode("auto", io.StringIO()) == "lines"
    assert [pick_mode(m, io.StringIO()) for m in ("bar", "lines", "none")] == ["bar", "lines", "none"]
    with pytest.raises(ConfigError, match="one of auto, bar, lines, none; got 'fancy'"):
        pick_mode("fancy")


def test_a_line_says_shards_rows_speed_eta_and_dead_letters() -> None:
    line = progress_line(_snap(14.0, 12_000, shards_done=3, rows_before=100))
    assert line == "progress: 3/10 shards, 12,000/20,000 rows, 850 rows/s, ETA 9 s, 4 dead letters"
    one = ProgressReading("r", 1, 0, 0, 1, 0, 1, 0.5)
    assert progress_line(one) == "progress: 0/1 shard, 0/1 row, 0 rows/s, 1 dead letter"
    failed = _snap(200.0, 20_000, shards_done=9, shards_failed=1, dead_letters=0, final=True)
    assert progress_line(failed) == (
        "progress: 9/10 shards (1 failed), 20,000/20,000 rows, 100 rows/s, took 3 min 20 s, 0 dead letters"
    )


def test_a_generators_line_says_tokens_per_second_beside_rows_per_second() -> None:
    counts = {"prompt_tokens": 60_000, "completion_tokens": 24_000}
    snap = _snap(
        14.0, 12_000, shards_done=3, rows_before=100, counts=counts, counts_before={"prompt_tokens": 4}
    )
    assert progress_line(snap) == (
        "progress: 3/10 shards, 12,000/20,000 rows, 850 rows/s, 1,714 completion tokens/s, "
        "4,285 prompt tokens/s, ETA 9 s, 4 dead letters"
    )


def test_lines_come_at_most_every_interval_and_once_more_at_the_end() -> None:
    out = io.StringIO()
    with showing("lines", every_s=1.0, stream=out):
        for elapsed in (0.0, 0.3, 0.9, 1.0, 1.5, 2.2):
            publish(_snap(elapsed, int(elapsed * 1000)))
        publish(_snap(2.4, 20_000, final=True))
    publish(_snap(3.0, 20_000))  # after the block: nobody listens
    lines = out.getvalue().splitlines()
    assert [ln.split(", ")[1] for ln in lines] == [
        "0/20,000 rows",
        "1,000/20,000 rows",
        "2,200/20,000 rows",
        "20,000/20,000 rows",
    ]
    assert lines[-1].startswith("progress: 10/10 shards") and "took 2 s" in lines[-1]


def test_none_shows_nothing() -> None:
    out = io.StringIO()
    with showing("none", stream=out):
        publish(_snap(5.0, 10))
    assert out.getvalue() == ""


def test_the_bar_draws_on_its_stream() -> None:
    out = io.StringIO()
    with showing("bar", stream=out):
        publish(_snap(2.0, 10_000, shards_done=5))
    assert "5/10 shards" in out.getvalue() and "10,000/20,000 rows" in out.getvalue()
