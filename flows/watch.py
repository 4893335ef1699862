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
from typing import Any

from shardwise.errors import TransientError
from shardwise.watch import EVENT, Backoff, install_trigger, open_watcher, source_resource
from tasks.connections import resolve

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


def watch(
    source: str,
    *,
    name: str,
    table: str | None = None,
    key: str = "id",
    updated_at: str | None = None,
    mode: str = "auto",
    interval_s: float = 30.0,
    debounce_s: float = 2.0,
    results: str | None = None,
    install: bool = False,
) -> None:
    """Watch until SIGINT or SIGTERM. The database may be down at start: keep trying until it is up."""
    from flows.serving import require_server

    require_server()  # events sent without a server would vanish
    url = resolve(source)
    if install and table:
        install_trigger(url, table, key)
        print(f"installed the change triggers on {table}", flush=True)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    seen = _ledger_seen(resolve(results), url) if results and not table else None
    backoff = Backoff()
    while not stop.is_set():
        try:
            watcher = open_watcher(
                url,
                name=name,
                emit=emit,
                table=table,
                key=key,
                updated_at=updated_at,
                mode=mode,  # type: ignore[arg-type]
                interval_s=interval_s,
                debounce_s=debounce_s,
                seen=seen,
            )
        except TransientError as exc:
            wait = backoff.next()
            _log.warning("cannot start watching yet (%s); trying again in %.1f s", exc, wait)
            stop.wait(wait)
            continue
        print(f"watching {name} with {type(watcher).__name__}; Ctrl-C to stop", flush=True)
        with watcher:
            watcher.run(stop)


def _ledger_seen(results_url: str, location: str) -> Any:
    """The ledger's scored (object key, ETag) pairs for ``location``, read fresh on every listing."""
    from shardwise.results import Ledger
    from shardwise.sources.parquet.source import open_store

    identity = open_store(location).identity
    ledger = Ledger(results_url)
    return lambda: ledger.seen_objects(identity)
