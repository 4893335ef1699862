"""Count outputs: the int result columns whose sums a run reports, such as a generator's token counts.

A model declares them, ``OutputColumn("completion_tokens", "int", count=True)``;
nothing here knows about tokens, and a model that declares none (an encoder, a
classifier) reports no counts at all. For a generator the counts mean:

* ``completion_tokens``: the tokens it generated, end-of-sequence not counted.
  Their rate is "tokens/s" as vLLM and Ray Data LLM report throughput.
* ``prompt_tokens``: the tokens it read (the rendered prompt).

Both are summed from each scored row's own outputs, never from the cost a
batch is budgeted by (prompt plus ``max_new_tokens``). Sums travel as plain
``{column: total}`` dicts: the engine adds up each batch's
(:class:`~shardwise.batch.stats.BatchStats`), which live progress reports; and each
chunk mark stores its chunk's, written in the transaction that merges the
chunk, so a shard's and a run's totals are sums of chunk marks, exact across
retries, resumes and runners: every stored row is counted once, whichever
attempt scored it. Shown, they are ordered by name, whatever order a
database's JSON gives them back in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardwise.model import OutputColumn

__all__ = [
    "Counts",
    "added",
    "count_columns",
    "counts_of_columns",
    "counts_of_rows",
    "in_words",
    "said",
    "said_per_s",
    "share",
]

Counts = dict[str, int]
"""Totals of count outputs by column name: ``{"completion_tokens": 144, "prompt_tokens": 360}``."""


def count_columns(outputs: Iterable[OutputColumn]) -> tuple[str, ...]:
    """The names of the outputs declared counts, in declared order."""
    return tuple(out.name for out in outputs if out.count)


def counts_of_columns(columns: Mapping[str, Any], names: Sequence[str]) -> Counts:
    """Each named column summed over a batch (``columns`` as a model's ``to_columns`` gives them)."""
    import numpy as np  # here, not above: chunk sizes and counts are read by --help, without numpy

    return {name: int(np.asarray(columns[name], dtype=np.int64).sum()) for name in names}


def counts_of_rows(rows: Iterable[Mapping[str, Any]], names: Sequence[str]) -> Counts:
    """Each named value summed over result rows (one mapping of column values per row)."""
    totals = dict.fromkeys(names, 0)
    for row in rows:
        for name in names:
            totals[name] += int(row[name])
    return totals


def added(*parts: Mapping[str, int] | None) -> Counts:
    """The sum of several counts, name by name; a None or missing part adds nothing."""
    totals: Counts = {}
    for part in parts:
        for name, value in (part or {}).items():
            totals[name] = totals.get(name, 0) + int(value)
    return totals


def said(counts: Mapping[str, int]) -> list[str]:
    """``["144 completion tokens", "360 prompt tokens"]``: each count with its column's name in words;
    cached tokens with their share of the prompt tokens, the prefix cache's hit rate
    (``"252 cached tokens (70.0% of prompt tokens)"``)."""
    return [f"{counts[name]:,} {in_words(name)}{share(counts, name)}" for name in sorted(counts)]


def share(counts: Mapping[str, int], name: str) -> str:
    """`` (70.0% of prompt tokens)`` for ``cached_tokens`` when prompt tokens are counted: the prefix cache's
    hit rate (vLLM's, or a remote model's cached prompt tokens); else ``""``."""
    if name != "cached_tokens" or not counts.get("prompt_tokens"):
        return ""
    return f" ({counts[name] / counts['prompt_tokens']:.1%} of prompt tokens)"


def said_per_s(rates: Mapping[str, float]) -> list[str]:
    """``["30 completion tokens/s", "75 prompt tokens/s"]``."""
    return [f"{rates[name]:,.0f} {in_words(name)}/s" for name in sorted(rates)]


def in_words(name: str) -> str:
    """A count column's name as words: ``completion tokens``."""
    return name.replace("_", " ")
