"""The JSON lines ``bench/gpu.py`` prints: one per figure, one per skipped or failed step, a summary last.

Every line is one JSON object with a ``step``. A figure line adds ``figure``,
``value`` (a number or a boolean) and ``unit``, then the context that makes
it comparable (precision, model, rows, device...). A step that did not run
says why in ``skipped``; one that broke says what in ``error``. The last
line, ``{"step": "summary", ...}``, lists the steps by outcome. Lines go to
stdout, and to a file as well when one is given, so that a run's figures can
be collected whatever else the run printed.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Literal

__all__ = ["ERROR_CHARS", "Lines", "Outcome", "error_line", "figure_line", "skipped_line"]

ERROR_CHARS = 1500
"""An error line keeps the last this many characters of the error: the end of a traceback says most."""

Outcome = Literal["ok", "skipped", "failed"]


def figure_line(
    step: str, figure: str, value: object, unit: str | None, **context: object
) -> dict[str, object]:
    """One figure; ``unit`` is None for a figure no unit is known for yet. A float that is not
    finite (a ratio over zero) is written ``null`` with the reason, since JSON has no NaN or infinity."""
    line: dict[str, object] = {"step": step, "figure": figure, "value": value, "unit": unit}
    if isinstance(value, float) and not math.isfinite(value):
        line.update(value=None, not_finite=str(value))
    line.update(context)
    return line


def skipped_line(step: str, why: str, **context: object) -> dict[str, object]:
    return {"step": step, "skipped": why, **context}


def error_line(step: str, error: str, **context: object) -> dict[str, object]:
    """What broke, its last :data:`ERROR_CHARS` characters, whitespace folded to keep one line."""
    folded = " | ".join(part.strip() for part in error.strip().splitlines() if part.strip())
    if len(folded) > ERROR_CHARS:
        folded = "..." + folded[-ERROR_CHARS:]
    return {"step": step, "error": folded, **context}


class Lines:
    """Prints JSON lines (to ``out``, and to the file ``copy``, made afresh, if given) and keeps each
    step's outcome in order."""

    def __init__(self, out: IO[str] = sys.stdout, copy: Path | None = None) -> None:
        self._out = out
        self._copy = None if copy is None else copy.open("w", encoding="utf-8")
        self.outcomes: dict[str, Outcome] = {}
        self.figures = 0

    def emit(self, line: Mapping[str, object]) -> None:
        text = json.dumps(line, allow_nan=False, default=str)
        for stream in (self._out, self._copy):
            if stream is not None:
                print(text, file=stream, flush=True)
        if "figure" in line:
            self.figures += 1

    def outcome(self, step: str, outcome: Outcome) -> None:
        self.outcomes[step] = outcome

    def summary(self, **context: object) -> dict[str, object]:
        """The last line: the steps by outcome, in the order they ran."""
        by: dict[str, list[str]] = {"ok": [], "skipped": [], "failed": []}
        for step, outcome in self.outcomes.items():
            by[outcome].append(step)
        line = {"step": "summary", **by, "figures": self.figures, **context}
        self.emit(line)
        return line

    def close(self) -> None:
        if self._copy is not None:
            self._copy.close()
