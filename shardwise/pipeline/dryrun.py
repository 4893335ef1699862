"""``shardwise plan``: what a run would do, without doing it."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from itertools import islice

from shardwise.errors import InputError
from shardwise.model import Model, TextInput
from shardwise.sources import Source, SourcePlan
from shardwise.text import coerce_input

__all__ = ["PlanPreview", "preview_plan"]

_SAMPLE_SHARDS = 4
_SAMPLE_ROWS = 64


@dataclass(frozen=True)
class PlanPreview:
    plan: SourcePlan
    tokens_per_row: float
    """Mean tokens per row (special tokens included, after truncation) over a sample of rows."""
    sampled_rows: int

    @property
    def estimated_tokens(self) -> int:
        return round(self.tokens_per_row * self.plan.expected_rows)


def preview_plan(source: Source, plan: SourcePlan, model: Model) -> PlanPreview:
    """Estimate tokens from the first rows of a few evenly spaced shards; nothing is written."""
    shards = plan.shards
    step = max(1, len(shards) // _SAMPLE_SHARDS)
    lengths: list[int] = []
    for shard in shards[::step][:_SAMPLE_SHARDS]:
        rows = source.read(plan, shard)
        try:
            texts: list[TextInput] = []
            for row in islice(rows, _SAMPLE_ROWS):
                try:
                    texts.append(coerce_input(row.value))
                except InputError:
                    continue
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()
        lengths += [len(e.ids) for e in model.tokenize(texts)]
    mean = statistics.fmean(lengths) if lengths else 0.0
    return PlanPreview(plan, mean, len(lengths))
