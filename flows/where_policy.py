"""A deployment may forbid free-form ``where`` filters: ``SHARDWISE_FORBID_WHERE=1``.

The engine checks every filter (one parsed expression, allowed functions
only); a deployment whose runs are started by people who should not write
SQL at all can refuse filters outright. The switch is an environment
variable, read here in ``flows/`` because the engine reads none, and both the
CLI's preflight and the ``score`` flow itself apply it, so a run started from
the UI, an event or a schedule is refused too.
"""

from __future__ import annotations

import os

from shardwise.errors import ConfigError

__all__ = ["FORBID_WHERE", "refuse_forbidden_where"]

FORBID_WHERE = "SHARDWISE_FORBID_WHERE"
_ON, _OFF = ("1", "true", "yes"), ("", "0", "false", "no")


def refuse_forbidden_where(where: str | None) -> None:
    """Raise :class:`ConfigError` when a filter is given and ``SHARDWISE_FORBID_WHERE`` forbids it.

    With a filter given, an unrecognised value of the variable is an error
    too: a typo must not silently allow what the deployment meant to forbid.
    """
    if where is None or not where.strip():
        return
    setting = os.environ.get(FORBID_WHERE, "").strip().lower()
    if setting not in _ON + _OFF:
        raise ConfigError(
            f"{FORBID_WHERE} must be 1/true/yes or 0/false/no; got {os.environ[FORBID_WHERE]!r}; "
            "fix the variable where the flow runs"
        )
    if setting in _ON:
        raise ConfigError(
            f"where filter {where!r} refused: this deployment forbids free-form filters "
            f"({FORBID_WHERE}={os.environ[FORBID_WHERE]}); leave out --where and select the rows with a "
            "view, or unset the variable"
        )
