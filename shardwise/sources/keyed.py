"""A source restricted to chosen keys: the shards of a redrive of dead letters.

:class:`KeyedSource` wraps a SQL or Parquet source and a list of keys, and
implements the :class:`~shardwise.sources.base.Source` interface, so the
pipeline plans, scores and merges it like any source. Its shards carry their
keys in their bounds (``{"keys": [...]}``, JSON-able), so a stored plan says
exactly which rows each shard reads, and reading a shard is
``inner.read_keys(keys)``.

What it does not do, on purpose:

* **No snapshot.** A keyed plan reads the source as it is when each shard is
  read (the plan's ``snapshot`` is None): a redrive is about rows that changed
  since they failed, so it must see current data.
* **No snapshot to report.** Its reader reports none, and a resumed shard
  reads its keys again and drops the rows its committed chunks hold.
* **No only-new.** The keys were already chosen; ``new_only`` is refused.

A key deleted from the source between planning and reading is not yielded, so
a shard may return fewer rows than ``expected_rows``.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from itertools import islice, pairwise
from typing import Any, TypeVar

from shardwise.errors import ConfigError
from shardwise.sources.base import (
    Key,
    NewOnly,
    ReadFrom,
    Shard,
    ShardReader,
    Source,
    SourcePlan,
    SourceRow,
    SourceValues,
)
from shardwise.sources.sizing import Sizing

__all__ = ["KeyedSource", "cut_runs", "is_keyed"]

T = TypeVar("T")


def is_keyed(plan: SourcePlan) -> bool:
    """Whether ``plan`` was made by a :class:`KeyedSource` (its shards hold keys, not ranges or spans)."""
    return bool(plan.params.get("keyed"))


def _sorted_keys(keys: Sequence[Key]) -> list[Key]:
    kinds = {type(k) for k in keys}
    if kinds - {int, str} or len(kinds) > 1:
        raise ConfigError(
            f"keys must be all integers or all text, as the source's key column holds them; got "
            f"{', '.join(sorted(t.__name__ for t in kinds))}: pass the keys as read from the source"
        )
    return sorted(set(keys))  # one type, checked above


def cut_runs(items: list[T], shards: int | None, per_shard: int | None) -> list[list[T]]:
    """Consecutive non-empty runs of ``items``: ``shards`` of them (or fewer items), or ``per_shard`` long.

    How a plan of listed things (keys, image objects) is cut into shards."""
    if shards is None:
        step = per_shard or 1
        return [items[lo : lo + step] for lo in range(0, len(items), step)]
    count = min(shards, len(items))
    edges = [i * len(items) // count for i in range(count + 1)] if count else []
    return [items[lo:hi] for lo, hi in pairwise(edges)]


class KeyedSource(Source):
    """``inner`` restricted to ``keys``; closing it closes ``inner``.

    ``keys`` are the source's own keys, typed as its key column holds them
    (ints or text), as :func:`~shardwise.pipeline.redrive.redrive_keys` returns
    them. ``kind_label`` says why these keys were chosen; the plan records it
    as ``params["keyed"]`` and ``params[kind_label] = True``, together with
    ``extra_params`` (for a redrive: which run, forced or not, what was skipped).
    """

    kind: str

    def __init__(
        self,
        inner: Source,
        keys: Sequence[Key],
        *,
        kind_label: str = "redrive",
        extra_params: Mapping[str, Any] | None = None,
    ) -> None:
        if not kind_label or not isinstance(kind_label, str):
            raise ConfigError(f"kind_label must be a non-empty string such as 'redrive'; got {kind_label!r}")
        self._inner, self._keys, self._label = inner, _sorted_keys(keys), kind_label
        self._extra = dict(extra_params or {})
        self.kind, self.identity = inner.kind, inner.identity
        self.plans_by_objects = inner.plans_by_objects

    @property
    def keys(self) -> tuple[Key, ...]:
        """The keys to read, sorted and without duplicates."""
        return tuple(self._keys)

    def plan_sized(self, sizing: Sizing, new_only: NewOnly | None) -> SourcePlan:
        """Cut the sorted keys into ``shards`` shards, or runs of ``rows_per_shard`` (see :class:`Sizing`)."""
        if new_only is not None:
            raise ConfigError(
                f"a keyed ({self._label}) plan reads the keys it was given; new_only does not apply: drop it"
            )
        runs = cut_runs(self._keys, sizing.shards, sizing.rows_per_shard_for(len(self._keys)))
        cut = tuple(Shard(i, len(run), {"keys": list(run)}) for i, run in enumerate(runs))
        params = {
            **self.params,
            **self._extra,
            "keyed": self._label,
            self._label: True,
            "keys": len(self._keys),
            **sizing.params(len(self._keys)),
            "new_only": None,
            "rows": len(self._keys),
        }
        return SourcePlan(self.kind, self.identity, None, cut, params)

    @property
    def params(self) -> dict[str, Any]:
        """What the wrapped source reads, with the key type the results table needs."""
        inner = self._inner.params
        if inner.get("key_type") is None and self._keys:
            return {**inner, "key_type": "int" if isinstance(self._keys[0], int) else "text"}
        return inner

    def check(self) -> None:
        """The source the keys are read from is checked."""
        self._inner.check()

    def value_kind(self) -> SourceValues:
        """What the source the keys are read from holds."""
        return self._inner.value_kind()

    @contextmanager
    def open_reader(
        self, plan: SourcePlan, shard: Shard, start: ReadFrom = ReadFrom()
    ) -> Iterator[ShardReader]:
        """The shard's keys' current rows (SQL: ordered by key; Parquet: in storage order).

        A resumed shard reads its keys again and drops the first ``start.rows``.
        """
        if not is_keyed(plan) or plan.kind != self.kind or plan.identity != self.identity:
            raise ConfigError(
                f"plan is a {'keyed' if is_keyed(plan) else 'range'} {plan.kind} plan of {plan.identity!r}; "
                f"this keyed source reads {self.identity!r}: read a plan with the source that made it"
            )
        keys = shard.bounds.get("keys")
        if not isinstance(keys, list):
            raise ConfigError(
                f"shard {shard.shard_id} bounds must be {{'keys': [...]}}; got {dict(shard.bounds)!r}: "
                "read a shard with the source that planned it"
            )
        rows = self._inner.read_keys(keys)
        with closing(rows):
            yield ShardReader(shard, None, False, islice(rows, start.rows, None))

    def read_keys(self, keys: Sequence[Key]) -> Generator[SourceRow, None, None]:
        """The wrapped source's rows for ``keys``."""
        return self._inner.read_keys(keys)

    def close(self) -> None:
        """Close the wrapped source."""
        self._inner.close()
