"""A chunk's measured usage, and a run's summed from its chunks: rows, tokens, device time, dollars.

Each committed chunk records, in the transaction that merges it, the device
it was scored on, the seconds it held that device (scoring only: from the
previous chunk's commit, or the attempt's start, to its last row's result)
and its cost (None when not priced, see :mod:`.prices`). A run's usage sums
its chunks, whichever attempt or invocation committed them, so a resumed
run costs what an uninterrupted one would have, less the work a crash lost.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shardwise.errors import ConfigError

__all__ = ["NO_DEVICE", "REMOTE", "ChunkUsage", "RunUsage", "device_kind", "dollars"]

TOKEN_COUNTS = ("prompt_tokens", "completion_tokens")
"""The count outputs a run's tokens are summed from (``cached_tokens`` are part of the prompt's)."""


REMOTE = "remote"
"""The device a remote model's chunks record: none of ours, so no device time (its wait is the provider's)."""
NO_DEVICE = "none of ours: a remote model runs on its provider's devices"
"""What a remote model's device-hours are, in the plan, the summary and the artifact alike."""


def device_kind(device: str) -> str:
    """The kind a device's time is priced by: ``cpu``, ``cuda``, ``mps``; one per device type."""
    return device.split(":", 1)[0] or "cpu"


@dataclass(frozen=True, slots=True)
class ChunkUsage:
    """What one chunk used: ``device_s`` seconds of a ``device`` (its kind) and ``cost_usd`` dollars."""

    device: str
    device_s: float
    cost_usd: float | None = None

    def __post_init__(self) -> None:
        if not self.device or not math.isfinite(self.device_s) or self.device_s < 0:
            raise ConfigError(
                f"a chunk's usage needs a device and seconds 0 or more; got {self.device!r}, "
                f"{self.device_s!r}"
            )


@dataclass(frozen=True)
class RunUsage:
    """A run's usage over every chunk it committed: rows, count outputs, device-seconds per device kind,
    and dollars (None when no chunk was priced; ``unpriced`` chunks had no price)."""

    rows: int = 0
    counts: Mapping[str, int] = field(default_factory=dict)
    device_s: Mapping[str, float] = field(default_factory=dict)
    cost_usd: float | None = None
    unpriced: int = 0
    """Chunks committed without a price (a local model with no price per device-hour)."""
    chunks: int = 0
    """Chunks whose usage was recorded (a chunk marked from a sink's record after a kill has none)."""

    @property
    def prompt_tokens(self) -> int:
        return int(self.counts.get("prompt_tokens", 0))

    @property
    def completion_tokens(self) -> int:
        return int(self.counts.get("completion_tokens", 0))

    @property
    def cached_tokens(self) -> int:
        return int(self.counts.get("cached_tokens", 0))

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def device_seconds(self) -> float:
        return float(sum(self.device_s.values()))

    @property
    def device_hours(self) -> float:
        return self.device_seconds / 3600.0

    @property
    def remote(self) -> bool:
        """Whether every chunk was a remote model's: its device-hours are none of ours."""
        return set(self.device_s) == {REMOTE}

    def hours_figure(self) -> str:
        """``0.0049 (cpu 17.6 s)``: the device-hours and each kind's seconds; a remote model's
        :data:`NO_DEVICE`, as the plan says it."""
        if self.remote:
            return NO_DEVICE
        return f"{self.device_hours:.4f}{self._kinds()}"

    def _kinds(self) -> str:
        kinds = ", ".join(f"{kind} {s:,.1f} s" for kind, s in sorted(self.device_s.items()))
        return f" ({kinds})" if kinds else ""

    @property
    def per_1k_rows(self) -> float | None:
        """Dollars per thousand rows; None without a cost or a row."""
        return None if self.cost_usd is None or not self.rows else self.cost_usd * 1000 / self.rows

    @property
    def per_1m_tokens(self) -> float | None:
        """Dollars per million tokens (prompt plus completion); None without a cost or a token."""
        return None if self.cost_usd is None or not self.tokens else self.cost_usd * 1e6 / self.tokens

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values: what ``shardwise runs --json``, the run's event and its artifact carry."""
        return {
            "rows": self.rows,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_tokens": self.cached_tokens,
            "device_seconds": self.device_seconds,
            "device_seconds_by_kind": dict(sorted(self.device_s.items())),
            "cost_usd": self.cost_usd,
            "cost_usd_per_1k_rows": self.per_1k_rows,
            "cost_usd_per_1m_tokens": self.per_1m_tokens,
        }

    def said(self) -> str:
        """``cost $0.0123 ($0.041/1k rows, $2.10/1M tokens), 0.0049 device-hours (cpu 17.6 s)``; without a
        price: ``cost unknown (no price set), 0.0049 device-hours (cpu 17.6 s)``."""
        hours = (
            f"device-hours: {NO_DEVICE}"
            if self.remote
            else f"{self.device_hours:.4f} device-hours{self._kinds()}"
        )
        if self.cost_usd is None:
            return f"cost unknown (no price set), {hours}"
        rates = [
            f"{dollars(v)}/{unit}"
            for v, unit in ((self.per_1k_rows, "1k rows"), (self.per_1m_tokens, "1M tokens"))
            if v is not None
        ]
        part = f" ({', '.join(rates)})" if rates else ""
        note = f"; {self.unpriced} chunks unpriced" if self.unpriced else ""
        return f"cost {dollars(self.cost_usd)}{part}, {hours}{note}"


def dollars(value: float | None) -> str:
    """``$12.35``, ``$0.0123``, ``$0.00003265``: four significant digits below a dollar, enough to
    tell small costs apart, and never in exponent notation (a person reads it, a script parses it);
    ``-`` for None."""
    if value is None:
        return "-"
    if value >= 1:
        return f"${value:,.2f}"
    if value <= 0:
        return "$0"
    places = 3 - math.floor(math.log10(value))
    return "$" + f"{value:.{places}f}".rstrip("0").rstrip(".")
