"""A run's live progress while its shards fan out: a Prefect progress artifact, and in-process listeners.

Every worker, whatever the runner, writes its shard's progress to the ledger
(:mod:`shardwise.pipeline.reporter`), so one daemon thread in the flow's
process reads the ledger about every second and turns the rows into a
:class:`~shardwise.pipeline.ProgressReading`. Each reading goes to the
listeners registered with :func:`listening` (the CLI's terminal view), and
at most every few seconds, when it changed, to the run's progress artifact,
whose description says what the CLI's progress line says (:func:`describe`).
A last reading, marked ``final``, goes out when the fan-out ends.

Progress is a view: nothing here may fail or hold up a run. Every error is
logged at debug level and the next poll tries again.
"""

from __future__ import annotations

import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from uuid import UUID

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from shardwise.model.counts import said_per_s
from shardwise.pipeline import ProgressReading, ShardOutcome, read_progress
from shardwise.results import Ledger
from shardwise.words import plural

__all__ = [
    "ARTIFACT_EVERY_S",
    "POLL_EVERY_S",
    "Listener",
    "ProgressPublisher",
    "describe",
    "duration",
    "listening",
    "publish",
]

POLL_EVERY_S = 1.0
"""Default seconds between two reads of the ledger."""
ARTIFACT_EVERY_S = 2.0
"""Least seconds between two updates of the progress artifact (each is a call to the Prefect API)."""

Listener = Callable[[ProgressReading], None]

_log = logging.getLogger(__name__)
_listeners: list[tuple[Listener, float | None]] = []
_listeners_lock = threading.Lock()


@contextmanager
def listening(listener: Listener, every_s: float | None = None) -> Iterator[None]:
    """Call ``listener`` with every snapshot of every run this process watches, while the block runs.

    ``every_s`` asks for a snapshot at least that often: the ledger is then
    read at the shortest interval any listener asks for, if shorter than
    :data:`POLL_EVERY_S` (``--progress lines --progress-every 0.2`` gets a
    fresh reading for each line). It is called from the watching thread, so
    it must be quick and must not block; an error it raises is logged at
    debug level and ignored.
    """
    entry = (listener, every_s)
    with _listeners_lock:
        _listeners.append(entry)
    try:
        yield
    finally:
        with _listeners_lock:
            _listeners.remove(entry)


def _poll_every_s(default_s: float) -> float:
    """``default_s``, or the shortest interval a listener asks for if shorter."""
    with _listeners_lock:
        asked = [every for _, every in _listeners if every is not None and every > 0]
    return min([default_s, *asked])


def publish(snapshot: ProgressReading) -> None:
    """Hand ``snapshot`` to every listener (what :class:`ProgressPublisher` does with each one it takes)."""
    with _listeners_lock:
        listeners = [listener for listener, _ in _listeners]
    for listener in listeners:
        try:
            listener(snapshot)
        except Exception as exc:
            _log.debug("progress listener %r failed: %s", listener, exc)


def describe(snapshot: ProgressReading, *, speed: bool = False) -> str:
    """The counts behind the percentage: ``3/10 shards, 12,000/20,000 rows, 4 dead letters``.

    With ``speed``, the rates and the time left (or, in the final snapshot,
    the time taken) come before the dead letters:
    ``3/10 shards, 12,000/20,000 rows, 850 rows/s, ETA 9 s, 4 dead letters``.
    A model that declares count outputs has their rates beside rows/s; for a
    generator, ``1,200 completion tokens/s`` (tokens generated) and ``3,400
    prompt tokens/s``, counted from the rows' outputs since watching began.
    """
    shards = _of(snapshot.shards_done, snapshot.shards_total, "shard")
    if snapshot.shards_failed:
        shards += f" ({snapshot.shards_failed:,} failed)"
    parts = [shards, _of(snapshot.rows_done, snapshot.rows_total, "row")]
    if speed:
        parts.append(f"{snapshot.rows_per_s:,.0f} rows/s")
        parts += said_per_s(snapshot.counts_per_s)
        eta = snapshot.eta_s
        if snapshot.final:
            parts.append(f"took {duration(snapshot.elapsed_s)}")
        elif eta is not None:
            parts.append(f"ETA {duration(eta)}")
    parts.append(plural(snapshot.dead_letters, "dead letter"))
    return ", ".join(parts)


def duration(seconds: float) -> str:
    """``9 s``, ``3 min 5 s``, ``2 h 10 min``."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def _of(done: int, total: int, word: str) -> str:
    """``3/10 shards``, ``0/1 shard``: the noun agrees with the total."""
    return f"{done:,}/{plural(total, word)}"


class ProgressPublisher:
    """Reads run ``run_id``'s progress from ``ledger`` and publishes it, while used as a context manager.

    The flow's side of progress: workers write it (``ProgressReporter``), this
    reads it back and hands each :class:`~shardwise.pipeline.ProgressReading`
    to the listeners and the artifact.

    Enter it after planning, inside the flow run (the progress artifact
    belongs to it), and pass :meth:`advance` to ``run_shards``: a finished
    shard then shows at once instead of at the next poll.
    """

    def __init__(
        self,
        ledger: Ledger,
        run_id: str,
        *,
        every_s: float | None = None,
        artifact_every_s: float | None = None,
    ) -> None:
        self._ledger, self._run_id = ledger, run_id
        self._every_s = every_s or POLL_EVERY_S
        self._artifact_every_s = artifact_every_s or ARTIFACT_EVERY_S
        self._wake, self._stopping = threading.Event(), threading.Event()
        self._tick_lock, self._show_lock = threading.Lock(), threading.Lock()
        self._started = time.monotonic()
        self._rows_before: int | None = None
        self._counts_before: dict[str, int] = {}
        self._artifact: UUID | None = None
        self._shown: tuple[float, str] | None = None
        self._shown_at = float("-inf")
        self._shown_elapsed_s = 0.0
        self.latest: ProgressReading | None = None
        """The last snapshot taken, or None before the first read of the ledger succeeded."""
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ProgressPublisher:
        self._started = time.monotonic()
        self._artifact = _create_artifact()
        self._tick(final=False)
        # Prefect finds its API through context variables: the thread gets a copy of this flow's.
        context = contextvars.copy_context()
        self._thread = threading.Thread(target=context.run, args=(self._loop,), daemon=True)
        self._thread.name = f"shardwise-progress-{self._run_id}"
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10 * self._every_s)
        self._tick(final=True)

    def advance(self, outcome: ShardOutcome | None = None) -> None:
        """A shard finished (``outcome`` None: it failed, or its outcome stays with a child flow run)."""
        self._wake.set()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait(_poll_every_s(self._every_s))
            self._wake.clear()
            if not self._stopping.is_set():
                self._tick(final=False)

    def _tick(self, *, final: bool) -> None:
        with self._tick_lock:
            try:
                shards = self._ledger.shard_progress(self._run_id)
            except Exception as exc:
                _log.debug("reading the progress of run %s failed: %s", self._run_id, exc)
                return
            elapsed = time.monotonic() - self._started
            snapshot = read_progress(
                self._run_id,
                shards,
                elapsed_s=elapsed,
                rows_before=self._rows_before or 0,
                final=final,
                counts_before=self._counts_before,
            )
            if self._rows_before is None:
                # What the first read finds done (a resumed run's done shards) is not this run's speed.
                self._rows_before, self._counts_before = snapshot.rows_done, dict(snapshot.counts)
                snapshot = dataclasses.replace(
                    snapshot, rows_before=snapshot.rows_done, counts_before=self._counts_before
                )
            self.latest = snapshot
            publish(snapshot)  # in order, and before the artifact: a line must not wait on an API call
        with self._show_lock:
            self._show(snapshot)

    def _show(self, snapshot: ProgressReading) -> None:
        """Update the artifact if its figures changed, at most every few seconds; always at the end."""
        shown = (round(snapshot.percent, 1), describe(snapshot, speed=True))
        now = time.monotonic()
        if self._artifact is None or shown == self._shown or snapshot.elapsed_s < self._shown_elapsed_s:
            return  # unchanged, or older than what is shown (two ticks raced past the lock)
        if not snapshot.final and now - self._shown_at < self._artifact_every_s:
            return
        try:
            update_progress_artifact(artifact_id=self._artifact, progress=shown[0], description=shown[1])
        except Exception as exc:
            _log.debug("updating the progress artifact failed: %s", exc)
            return
        self._shown, self._shown_at, self._shown_elapsed_s = shown, now, snapshot.elapsed_s


def _create_artifact() -> UUID | None:
    try:
        return create_progress_artifact(  # type: ignore[return-value]
            progress=0.0, key="shardwise-progress", description="Planned; reading progress"
        )
    except Exception as exc:
        _log.debug("creating the progress artifact failed: %s", exc)
        return None
