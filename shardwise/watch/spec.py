"""What a watcher watches, and how often: one value from the CLI to the watcher.

``shardwise watch`` builds a :class:`WatchSpec` from its options (each
option's destination is the field's name, as for the score flow's
parameters), :func:`flows.watch.watch` resolves its source, and
:func:`~shardwise.watch.factory.open_watcher` hands it to the watcher it
picks. Each watcher reads the fields that apply to it:

* :class:`~shardwise.watch.pg_notify.PgNotifyWatcher`: the table fields and
  ``debounce_s``;
* :class:`~shardwise.watch.poller.WatermarkPoller`: the table fields and
  ``interval_s``;
* :class:`~shardwise.watch.object_watcher.ObjectWatcher`: ``source`` (the
  Parquet location) and ``interval_s``.

The checks that need no connection run when the spec is made, so a bad
option fails before anything is watched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shardwise.db.timeouts import check_db_timeout
from shardwise.errors import ConfigError
from shardwise.sources.sql.timeout import DEFAULT_QUERY_TIMEOUT_S
from shardwise.watch.events import check_name

__all__ = ["DEFAULT_DEBOUNCE_S", "Mode", "WatchSpec"]

Mode = Literal["auto", "notify", "poll"]
DEFAULT_DEBOUNCE_S = 0.5
"""How long notifications are gathered into one event. Short, because every second of it is a second
of a triggered run's latency; safe, because the on-new-data deployment runs one at a time and only-new,
so a burst split into several events costs follow-up runs that find nothing to do, never a row twice."""
_MODES = ("auto", "notify", "poll")


@dataclass(frozen=True)
class WatchSpec:
    """A source to watch, the name its events carry, and the watch's timing.

    ``source`` is a database URL with ``table`` (``key`` and, optionally,
    ``updated_at`` and ``schema`` name its columns and schema), or a Parquet
    location. ``mode`` picks the SQL watcher (see
    :mod:`~shardwise.watch.factory`). ``interval_s`` is the pause between
    polls or listings, ``debounce_s`` how long notifications are gathered
    into one event.
    """

    source: str
    name: str
    table: str | None = None
    key: str = "id"
    updated_at: str | None = None
    schema: str | None = None
    mode: Mode = "auto"
    interval_s: float = 30.0
    debounce_s: float = DEFAULT_DEBOUNCE_S
    named_by: str | None = None
    """The reference ``source`` was resolved from (``env:NAME``, ``secret:NAME``), if it was: events and
    the watcher's stored state then name the source by it, never by its value
    (:mod:`shardwise.secrets.by_reference`)."""
    timeout_s: float = DEFAULT_QUERY_TIMEOUT_S
    """How long a SQL watcher's look at the table may wait for the database's answer, plus a margin,
    before the connection is given up as stalled and made anew (:mod:`shardwise.db.timeouts`); 0: for
    ever. Long, because a watermark's ``count(*)`` over a big table may rightly take minutes."""

    def __post_init__(self) -> None:
        check_name(self.name)
        if self.mode not in _MODES:
            raise ConfigError(f"mode must be 'auto', 'notify' or 'poll'; got {self.mode!r}")
        if not self.interval_s > 0:
            raise ConfigError(f"interval_s must be a positive number of seconds; got {self.interval_s!r}")
        if not self.debounce_s >= 0:
            raise ConfigError(f"debounce_s must be a number of seconds >= 0; got {self.debounce_s!r}")
        check_db_timeout(self.timeout_s, "timeout_s")

    def sql_table(self) -> str:
        """The table to watch; a :class:`ConfigError` when there is none."""
        if not self.table:
            raise ConfigError("a SQL source needs the table to watch; pass table=NAME")
        return self.table

    def check_location(self) -> None:
        """Refuse the SQL-only fields for a Parquet location: it is watched by listing its objects."""
        if self.table is not None or self.updated_at is not None or self.mode != "auto":
            raise ConfigError(
                "table, updated_at and mode apply to SQL sources only; a Parquet location is watched by "
                "listing its objects (drop them, or pass a database URL)"
            )
