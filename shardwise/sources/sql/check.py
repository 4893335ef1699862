"""Checks that a stored plan and shard belong to the SQL source asked to read them.

A resumed run reads the plan it stored instead of planning again, so a read
must refuse a plan made for another table, key, text column or filter: the
shard bounds would then mean something else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.errors import ConfigError
from shardwise.sources.base import KeyType, NewOnly, Shard, SourcePlan

__all__ = ["check_plan", "new_only_params"]

_CHECKED = ("table", "schema", "key", "text_column", "image_column", "input_columns", "where")


def new_only_params(new_only: NewOnly | None, results_found: bool) -> dict[str, Any] | None:
    """How a plan records ``--only-new``, so its reads apply the same anti-join."""
    if new_only is None:
        return None
    return {
        "model_version": new_only.model_version,
        "results_table": new_only.results_table,
        "results_table_found": results_found,
    }


def _check_bound(name: str, value: Any, kind: KeyType) -> None:
    wanted = int if kind == "int" else str
    if value is not None and (isinstance(value, bool) or not isinstance(value, wanted)):
        raise ConfigError(
            f"shard bound {name}={value!r} is not a {wanted.__name__} key; the key column is "
            f"{kind}-typed, so the plan was made for another source"
        )


def check_plan(
    plan: SourcePlan, shard: Shard, identity: str, params: Mapping[str, Any], kind: KeyType
) -> NewOnly | None:
    """Refuse a plan or shard this source did not make; return the plan's only-new setting."""
    if plan.kind != "sql" or plan.identity != identity:
        raise ConfigError(
            f"plan is for {plan.kind} source {plan.identity!r}; this source reads {identity!r}; "
            "read a plan with the source that made it"
        )
    for name in _CHECKED:
        if plan.param(name) != params[name]:
            raise ConfigError(
                f"plan has {name}={plan.param(name)!r} but this source has {name}={params[name]!r}; "
                "build the source with the plan's settings, or plan again"
            )
    if set(shard.bounds) != {"lo", "hi"}:
        raise ConfigError(f"shard bounds must be {{'lo', 'hi'}}; got {sorted(shard.bounds)}")
    _check_bound("lo", shard.bounds["lo"], kind)
    _check_bound("hi", shard.bounds["hi"], kind)
    stored = plan.params.get("new_only")
    return None if stored is None else NewOnly(stored["model_version"], stored["results_table"])
