"""How a run's summary states its count totals (a generator's tokens), for the CLI and the flow's log.

The totals are the whole run's: every chunk the run committed, whichever
invocation scored it, so a resumed run reports what an uninterrupted one
would have, like its ``rows_out``. A model that declares no count outputs
(an encoder, a classifier) states nothing. The rates, this invocation's,
are in the live progress (``tasks/progress.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.counts import said

__all__ = ["whole_run"]


def whole_run(summary: Mapping[str, Any]) -> list[str]:
    """``["whole run, resumes included: 144 completion tokens, 360 prompt tokens"]``, or ``[]``."""
    counts = summary.get("counts") or {}
    return [f"whole run, resumes included: {', '.join(said(counts))}"] if counts else []
