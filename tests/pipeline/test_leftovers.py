"""Tidying what killed writers left, as a run starts, is housekeeping: a failure is one line, never a
failed run (the next run tries again)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shardwise.errors import TransientError
from shardwise.pipeline.leftovers import tidy_leftovers
from shardwise.results import Ledger


class _Refusing:
    """A sink (the protocol boundary) whose tidy fails as ``error`` does."""

    target = "parquet:/lake/res"

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.asked: list[Callable[[str], bool | None]] = []

    def tidy(self, over: Callable[[str], bool | None]) -> list[str]:
        self.asked.append(over)
        raise self.error


@pytest.mark.parametrize(
    "error", [TransientError("listing _tmp/ failed"), PermissionError(13, "Permission denied", "_tmp/x")]
)
def test_a_tidy_that_fails_is_one_line_and_the_run_goes_on(tmp_path: Path, error: BaseException) -> None:
    with Ledger(f"sqlite:///{tmp_path / 'ledger.db'}") as ledger:
        sink: Any = _Refusing(error)
        (line,) = tidy_leftovers(ledger, sink)
        assert sink.asked == [ledger.run_over]
        assert line.startswith(
            "tidying what killed writers left in parquet:/lake/res failed (the next run tries again): "
        )
        assert str(error) in line and "\n" not in line
        assert ledger.run_over("never-recorded") is None  # a run this ledger does not know is left alone
