"""Results in a Delta Lake table (delta-rs, no JVM), locally or on S3: :mod:`.sink` writes it, and
:mod:`.commits` reads a shard's chunk commits back from the table's own log. :mod:`.kind` is
the registry entry.
"""

from __future__ import annotations

from shardwise.sinks.delta.kind import KIND, DeltaKind

__all__ = ["KIND", "DeltaKind"]
