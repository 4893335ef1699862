"""``shardwise watch``: turn "new data landed" into the Prefect event that starts the on-new-data deployment.

The watchers in ``shardwise.watch`` decide *when* something changed; this
module only wires them to Prefect's event client and keeps them running.
In production an S3 event notification (through SQS or EventBridge) can call
:func:`announce_objects` instead of listing: it emits the same event.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from shardwise.errors import TransientError
from shardwise.pipeline.destination import find_ledger
from shardwise.tasks.connections import resolve
from shardwise.watch import EVENT, Backoff, WatchSpec, install_trigger, open_watcher, source_resource

__all__ = ["announce_objects", "emit", "watch"]

_log = logging.getLogger("shardwise.watch")


def emit(*, event: str, resource: dict[str, str], payload: dict[str, Any]) -> object:
    """Send one event to the Prefect API (``PREFECT_API_URL``) and say so on the console."""
    from prefect.events import emit_event

    sent = emit_event(event=event, resource=resource, payload=payload)
    print(f"emitted {event} for {resource['prefect.resource.id']}: {payload}", flush=True)
    return sent


def announce_objects(name: str, location: str, objects: Sequence[dict[str, Any]]) -> object:
    """The event for objects reported by an S3 notification (each with ``key``, ``etag``, ``size``)."""
    payload = {"location": location, "count": len(objects), "objects": list(objects)}
    return emit(event=EVENT, resource=source_resource(name), payload=payload)


def watch(spec: WatchSpec, *, results: str | None = None, install: bool = False) -> None:
    """Watch until SIGINT or SIGTERM. The database may be down at start: keep trying until it is up.

    ``spec.source`` and ``results`` may be connection names (``env:NAME``,
    ``secret:NAME``); ``results`` lets a Parquet watcher skip the objects
    already scored, ``install`` installs the PostgreSQL change triggers first.
    """
    from shardwise.flows.serving import require_server

    require_server()  # events sent without a server would vanish
    spec = replace(spec, source=resolve(spec.source), named_by=spec.source)  # events name the reference
    if install and spec.table:
        install_trigger(spec.source, spec.table, spec.key, schema=spec.schema)
        print(f"installed the change triggers on {spec.table}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    seen = (
        _ledger_seen(find_ledger(None, results, None, resolve), spec.source, spec.named_by)
        if results and not spec.table
        else None
    )
    backoff = Backoff()
    while not stop.is_set():
        try:
            watcher = open_watcher(spec, emit, seen=seen)
        except TransientError as exc:
            wait = backoff.next()
            _log.warning("cannot start watching yet (%s); trying again in %.1f s", exc, wait)
            stop.wait(wait)
            continue
        print(f"watching {spec.name} with {type(watcher).__name__}; Ctrl-C to stop", flush=True)
        with watcher:
            watcher.run(stop)


def _ledger_seen(ledger_url: str, location: str, named_by: str | None) -> Any:
    """The ledger's scored (object key, ETag) pairs for ``location``, read fresh on every listing: under
    the name runs record it by (``named_by``, see :mod:`shardwise.secrets.by_reference`), or in clear.

    A watcher does not know where the runs it starts write, so a pair counts as scored once every
    destination that ever read ``location`` scored it: an object one destination still lacks is
    announced (the run's only-new skips it where it is already scored), and none is missed."""
    from shardwise.results import Ledger
    from shardwise.secrets.by_reference import by_reference
    from shardwise.sources.files.stores import open_store

    identity = open_store(location).identity
    names = {by_reference(named_by, identity), identity}
    ledger = Ledger(ledger_url)
    return lambda: frozenset().union(*(ledger.seen_objects(name, None) for name in names))
