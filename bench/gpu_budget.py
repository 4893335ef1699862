"""How ``bench/gpu.py`` shares its time (``--budget-s``) among its steps, so the whole run fits one call.

Each step gets a share of the time left, in proportion to its weight among
the steps still to run, less a margin kept for the end. A step that finishes
early leaves its time to the ones after it; one that would overrun is
stopped at its share, so no step can eat the others' time. A step whose
share is under its minimum is not started at all (it could not finish) and
is reported as skipped, with the seconds it would have needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["MARGIN_S", "Budget", "share"]

MARGIN_S = 5.0
"""Kept back from every share: stopping a step that overran, and the summary line."""


def share(left_s: float, weights: Sequence[float]) -> float:
    """The first step's seconds out of ``left_s``, by its weight among ``weights`` (it and those after)."""
    if not weights or any(w <= 0 for w in weights):
        raise ValueError(f"weights must be positive, one per step still to run; got {list(weights)}")
    return max(0.0, left_s - MARGIN_S) * weights[0] / sum(weights)


@dataclass
class Budget:
    """``total_s`` seconds from the moment it is made (by ``clock``, monotonic by default)."""

    total_s: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        if not self.total_s > 0:
            raise ValueError(f"a budget must be a positive number of seconds, got {self.total_s}")
        self.started = self.clock()

    @property
    def elapsed_s(self) -> float:
        return self.clock() - self.started

    @property
    def left_s(self) -> float:
        return max(0.0, self.total_s - self.elapsed_s)

    def allot(self, weights: Sequence[float]) -> float:
        """Seconds for the next step, whose weight is ``weights[0]``; the rest are the steps after it."""
        return share(self.left_s, weights)
