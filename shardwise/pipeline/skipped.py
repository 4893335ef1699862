"""The rows a run reads but neither scores nor dead-letters: counted, said in its summary, never silent.

Every row of the source a run plans over ends as exactly one of: a result,
a dead letter, or a counted skip. So a completed run's summary adds up::

    rows of the source = results (rows_out) + dead letters (rows_failed) + skipped

(over the rows a ``--where`` filter keeps, and the keys a redrive chose).
A row is skipped, never silently, for one of three reasons:

* **A NULL key** (``null_key``). A dead letter is a promise that the row can
  be found again, fixed, and redriven by its key; a row without a key cannot
  be read back (a redrive reads by key), and several such rows could not even
  be told apart. So a row with a NULL key is not a dead letter: it is not
  read, its plan counts it (``params["null_keys"]``, exact for SQL and
  Parquet sources alike), the run logs a warning that says how many and how
  to fix them (:func:`null_key_warning`), and its summary counts them. SQL
  and Parquet sources follow this one rule.
* **Already scored** (``already_scored``): ``--only-new`` left the row out
  because it has a current result (a SQL source's ``skipped_rows``).
* **Already read** (``already_read``): ``--only-new`` left out the object
  (a Parquet, CSV or JSON Lines file) the row lies in, because a completed
  run already read it: its rows were scored *or* dead-lettered there (a
  line that did not parse, a row the model refused), so they are not all
  "already scored", and the summary does not say they were.
* **An unparsable line** (``unparsable``): a line of a CSV or JSON Lines file
  that does not parse (a wrong number of fields, not one JSON object) has no
  key to redrive it by either, for the same reason as a NULL key; its plan
  counts it (``params["unparsable_lines"]``) and names the first few, apart
  from the NULL keys, since its fix is to repair the line, not to set a key.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from shardwise.sources.base import SourcePlan
from shardwise.words import plural

__all__ = ["Skipped", "null_key_warning"]


@dataclass(frozen=True)
class Skipped:
    """A run's skipped rows, by reason."""

    null_key: int = 0
    already_scored: int = 0
    already_read: int = 0
    unparsable: int = 0

    @classmethod
    def of(cls, plan: SourcePlan) -> Skipped:
        """What ``plan`` skips, as it counted when it was made (a resumed run's stored plan alike): a plan
        by objects skips whole files a completed run read, any other skips rows with a current result."""
        params = plan.params
        nulls, skipped = int(params.get("null_keys") or 0), int(params.get("skipped_rows") or 0)
        unparsable = int(params.get("unparsable_lines") or 0)
        if plan.by_objects:
            return cls(nulls, already_read=skipped, unparsable=unparsable)
        return cls(nulls, skipped, unparsable=unparsable)

    @classmethod
    def from_dict(cls, counts: Mapping[str, Any] | None) -> Skipped:
        """From :meth:`as_dict` (a run summary's ``skipped``); missing reasons count 0."""
        given = dict(counts or {})
        names = ("null_key", "already_scored", "already_read", "unparsable")
        return cls(*(int(given.get(name, 0)) for name in names))

    @property
    def total(self) -> int:
        return self.null_key + self.already_scored + self.already_read + self.unparsable

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def reasons(self) -> str:
        """``2 with a NULL key, 1 unparsable, 1 already scored``; empty when nothing was skipped."""
        counted = (
            (self.null_key, "with a NULL key"),
            (self.unparsable, "unparsable"),
            (self.already_scored, "already scored"),
            (self.already_read, "in files a completed run already read, scored or dead-lettered"),
        )
        return ", ".join(f"{n:,} {why}" for n, why in counted if n)

    def describe(self) -> str:
        """``0 skipped``, or ``3 skipped (2 with a NULL key, 1 already scored)``."""
        reasons = self.reasons()
        return f"{self.total:,} skipped" + (f" ({reasons})" if reasons else "")


def null_key_warning(plan: SourcePlan) -> str | None:
    """The warning for a plan that skips rows with a NULL key: how many, why, and the fix; else None."""
    nulls = Skipped.of(plan).null_key
    if not nulls:
        return None
    key, one = plan.params.get("key", "key"), nulls == 1
    if plan.by_objects:
        where = plan.params.get("null_key_objects") or []
        found = f" (in {', '.join(where)}{' and more' if len(where) >= 5 else ''})" if where else ""
        fix = f"write the key {key!r} of every row and rewrite the files"
    else:
        found = ""
        fix = f"set {key!r} on those rows; to leave them out on purpose, add --where '{key} IS NOT NULL'"
    them = "it" if one else "them"
    return (
        f"{plural(nulls, 'row')}{found} {'has' if one else 'have'} NULL in key column {key!r}, so "
        f"{'it is' if one else 'they are'} skipped, neither scored nor dead-lettered: a dead letter is "
        f"found and redriven by its key. The run's summary counts {them}. To score {them}, {fix}"
    )
