"""English for counts in messages, logs and reports: ``1 shard``, ``2 shards``."""

from __future__ import annotations

__all__ = ["plural"]


def plural(count: int, noun: str) -> str:
    """``1 row``, ``2 rows``, ``12,000 rows``, ``0 dead letters`` (regular nouns only: each caller's are)."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"
