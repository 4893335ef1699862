"""What a run lends its model beyond generation settings: the model kind's own options, the resolver for
the secrets they name, and the run's retry policy; and a check that the model answers before a run starts.

A remote model (:mod:`shardwise.models.endpoints`) is reached at an endpoint, with a key that the run's
resolver reads where the requests are made, paced by budgets and retried under the run's deadline: its
options (``--api-base``, ``--max-concurrency``, ...) belong to its kind, which checks them, as a sink kind
checks its own. A model kind without options refuses any that are given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from shardwise.errors import ConfigError
from shardwise.model import ModelSpec
from shardwise.retry_policy import RetryPolicy

__all__ = ["Reachable", "RunBound", "bind"]


@runtime_checkable
class RunBound(Protocol):
    """A model spec that takes its kind's options, the run's resolver and its retry policy."""

    def bound(
        self, options: Mapping[str, Any], resolve: Callable[[str], str], retry: RetryPolicy
    ) -> ModelSpec:
        """This spec with ``options`` (its kind's, by name; refused in one line naming the option, never its
        value), reading secrets through ``resolve`` and retrying under ``retry``."""
        ...


@runtime_checkable
class Reachable(Protocol):
    """A model spec that can tell, before a run starts, whether its model answers (a remote endpoint)."""

    def check_reachable(self) -> None:
        """Raise a :class:`~shardwise.errors.ConfigError` (a refused key, an unknown model) or a transient
        error (nothing listening) in one line naming the model and the fix."""
        ...


def bind(
    spec: ModelSpec, options: Mapping[str, Any], resolve: Callable[[str], str], retry: RetryPolicy
) -> ModelSpec:
    """``spec`` bound to a run: see :class:`RunBound`. A spec that takes no options refuses any given."""
    if isinstance(spec, RunBound):
        return spec.bound(options, resolve, retry)
    if options:
        raise ConfigError(
            f"model {spec.name!r} takes no model options ({', '.join(sorted(options))}): they apply to the "
            "models of the kind that declares them (remote models: openai:NAME, anthropic:NAME, "
            "openai-embed:NAME); drop them, or give such a model"
        )
    return spec
