"""Helpers for the watcher tests: a recording emitter and a writer for the watched table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

PASSWORD = "topsecret"


@dataclass
class Recorder:
    """A fake emitter (the emitter is a protocol boundary): keeps every event it is handed.

    ``events`` and ``payloads`` are the whole history, so a check over them after a ``take()``
    still sees every event (checks over an emptied list pass whatever happened).
    """

    events: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    _taken: int = 0

    def __call__(self, *, event: str, resource: dict[str, str], payload: dict[str, Any]) -> None:
        json.dumps(payload)  # payloads must be JSON-able
        self.events.append((event, resource, payload))

    @property
    def payloads(self) -> list[dict[str, Any]]:
        return [p for _, _, p in self.events]

    def take(self) -> list[dict[str, Any]]:
        """The payloads handed in since the last ``take()``; the history keeps them."""
        out, self._taken = self.payloads[self._taken :], len(self.events)
        return out


def with_password(url: str) -> str:
    """``url`` with a password that trust authentication ignores: it must never show up in an event."""
    return url.replace("://root@", f"://root:{PASSWORD}@", 1)


def execute(url: str, *statements: str, params: Sequence[dict[str, Any]] = ()) -> None:
    """Run statements in one transaction on a separate writer engine, as the application would."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for stmt in statements:
                conn.execute(sa.text(stmt), list(params) or None)
    finally:
        engine.dispose()


def make_docs(url: str, ids: Sequence[int] = ()) -> None:
    """``docs (id, text, updated_at)`` holding ``ids``."""
    pg = url.startswith("postgresql")
    stamp = "timestamptz" if pg else "TIMESTAMP"
    execute(url, f"CREATE TABLE docs (id BIGINT PRIMARY KEY, text TEXT, updated_at {stamp})")
    insert(url, ids)


def insert(url: str, ids: Sequence[int]) -> None:
    """Insert ``ids`` in one multi-row statement (an executemany would be one statement per row)."""
    if ids:
        rows = ", ".join(f"(:id{i}, :text{i}, CURRENT_TIMESTAMP)" for i in range(len(ids)))
        values = {f"id{i}": k for i, k in enumerate(ids)} | {
            f"text{i}": f"doc {k}" for i, k in enumerate(ids)
        }
        execute(url, f"INSERT INTO docs (id, text, updated_at) VALUES {rows}", params=[values])


def assert_no_secret(recorder: Recorder) -> None:
    assert PASSWORD not in json.dumps(recorder.events)
