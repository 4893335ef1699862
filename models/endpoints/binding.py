"""What a remote spec takes from the run that uses it, shared by both remote kinds (chat and embeddings):
the endpoint's options, the resolver that reads its key, and the retry policy that bounds an outage."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from shardwise.models.endpoints.options import EndpointOptions

if TYPE_CHECKING:  # typing.Self is Python 3.11+; the package supports 3.10
    from typing_extensions import Self

    from shardwise.pipeline.spec import Resolver
    from shardwise.retry_policy import RetryPolicy

__all__ = ["RunBinding"]


class RunBinding:
    """For a frozen dataclass with ``options``, ``resolve`` and ``retry`` fields: a copy with each changed,
    and :meth:`bound`, all three from a run (:class:`~shardwise.model.run_bound.RunBound`)."""

    def configured(self, options: EndpointOptions) -> Self:
        """The same model reached with ``options`` (address, key reference, limits, timeout)."""
        return replace(self, options=options)  # type: ignore[type-var]

    def retrying(self, policy: RetryPolicy) -> Self:
        """The same model, its requests retried under ``policy`` (the run's: its ``deadline_s`` bounds an
        outage of the endpoint as it bounds one of the database)."""
        return replace(self, retry=policy)  # type: ignore[type-var]

    def resolving(self, resolve: Resolver) -> Self:
        """The same model, its key reference read through ``resolve`` (the run's resolver)."""
        return replace(self, resolve=resolve)  # type: ignore[type-var]

    def bound(self, options: Mapping[str, Any], resolve: Resolver, retry: RetryPolicy) -> Self:
        """This model as a run uses it: reached with the run's endpoint ``options`` (refused in one line
        naming the option, never its value), its key read through the run's resolver, its requests retried
        under the run's policy. No options given keeps the spec's own (a catalogue's spec has the
        provider's defaults; a plug-in's, whatever it was built with)."""
        given = self.configured(EndpointOptions.of(options)) if options else self
        return given.resolving(resolve).retrying(retry)
