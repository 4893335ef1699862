"""Every error Shardwise raises on purpose.

The tree decides what happens next, so callers catch by class, never by message::

    ShardwiseError                 base: anything Shardwise raises deliberately
    ├── ConfigError                a setting or parameter is wrong; fix it and re-run
    │   ├── UnknownModelError      a model name not in the catalogue
    │   └── UnsetReference         an env:NAME or secret:NAME that names nothing set
    ├── InputError                 one input row is unusable (null, empty, not text,
    │   │                          undecodable); it goes to the dead-letter table
    │   └── OutputError            the row ran, and its output broke the run's rule
    │                              (not JSON, or not the schema): a dead letter too
    ├── SourceError                the source table or dataset is not what was asked
    │   │                          for (missing table or column, bad identifier)
    │   └── SourceChangedError     a file or object changed after the run's plan listed
    │                              it: no retry or --resume can read it, a new run can
    ├── RetryDeadlineError         transient failures outlasted the run's retry deadline
    │                              (shardwise.retry_policy); final for this attempt chain:
    │                              nothing retries it, --resume does once the outage ends
    ├── ShardStateError            a shard was asked to move where its state machine
    │                              forbids (shardwise.results.shard_states)
    ├── RunTakenOverError          another process took the run over (a forced resume)
    │                              while this one ran it; that process finishes it
    ├── WorkerPreempted            the worker got SIGTERM (a spot notice, an eviction) and
    │                              let its shard go; the flow runs it on another worker
    ├── BudgetReached              the run's next chunk would pass its --budget-usd or
    │                              --budget-tokens: its shard stops at a chunk boundary,
    │                              everything committed stays;
    │                              --resume with a larger budget goes on
    └── TransientError             may succeed if tried again: a dropped connection,
        │                          throttling, a serialisation failure
        └── DeviceOutOfMemoryError the device ran out of memory even for one row

Third-party errors (psycopg, botocore, torch) are mapped onto this tree at the
boundary where they occur, with ``raise ... from exc`` so the cause is kept.
Retry policies retry :class:`TransientError` only; everything else fails fast.
:class:`RetryDeadlineError` is deliberately not transient: it is what a layer
raises once it has retried a transient error up to the shard's deadline, so
that no layer above retries it again and multiplies the deadline.

Messages follow one rule: say the rule, the value that broke it, and the fix or
the valid options.
"""

from __future__ import annotations

__all__ = [
    "BudgetReached",
    "ConfigError",
    "DeviceOutOfMemoryError",
    "InputError",
    "OutputError",
    "RetryDeadlineError",
    "RunTakenOverError",
    "ShardStateError",
    "ShardwiseError",
    "SourceChangedError",
    "SourceError",
    "TransientError",
    "UnknownModelError",
    "UnsetReference",
    "WorkerPreempted",
]


class ShardwiseError(Exception):
    """Base class of every error Shardwise raises on purpose."""


class ConfigError(ShardwiseError, ValueError):
    """A setting or parameter is invalid. Permanent: retrying cannot help."""


class UnknownModelError(ConfigError, KeyError):
    """A model name that is not in the catalogue."""

    def __str__(self) -> str:  # KeyError would otherwise repr() the message
        return str(self.args[0]) if self.args else ""


class UnsetReference(ConfigError):
    """A reference (``env:NAME``, ``secret:NAME``) names nothing set where it is read.

    Its message advises a connection URL; a caller that read another kind of value through the reference
    (an API key) says its own fix from ``reference`` and ``names``, never showing a value.
    """

    def __init__(self, message: str, *, reference: str, names: str) -> None:
        super().__init__(message)
        self.reference = reference
        """The reference as given, ``env:NAME``."""
        self.names = names
        """What it names and why that is nothing: ``environment variable 'NAME', which is not set``."""


class InputError(ShardwiseError, ValueError):
    """One input row cannot be scored. The row is dead-lettered; the run goes on."""


class OutputError(InputError):
    """A row's output broke a rule the run set (``--json-schema``): dead-lettered after running."""


class SourceError(ShardwiseError):
    """The source does not hold what was asked for. Permanent."""


class SourceChangedError(SourceError):
    """A file or object of the source changed after the run's plan listed it. The run reads what its plan
    listed, so neither a retry nor ``--resume`` can finish it; a new run plans the source again."""


class RunTakenOverError(ShardwiseError):
    """This process lost its run's lease to a forced resume (``--resume RUN_ID --force``) while it ran.

    Nothing is wrong with the input, and nothing needs retrying: the process
    that took the run over finishes it, and what this one merged stays merged.
    The command line exits with its own code for it (see ``flows/outcome.py``).
    """


class WorkerPreempted(ShardwiseError):
    """The worker process got SIGTERM while it held the shard, and let it go (see
    :mod:`shardwise.pipeline.preemption`). Not a failure of the shard, and not transient either: a
    retry in the same process would meet the same stop, so the flow runs the shard on another worker."""


class BudgetReached(ShardwiseError):
    """The run's committed usage, its chunks in flight and its next chunk's would pass a budget (see
    :mod:`shardwise.cost.budget`): the shard stops at a chunk boundary. Not transient: nothing retries
    it; ``--resume`` with a larger budget goes on after the committed chunks."""


class RetryDeadlineError(ShardwiseError):
    """Transient failures went on past the shard's retry deadline; the shard fails with this reason."""


class ShardStateError(ShardwiseError):
    """A shard's status may not change that way (scoring a failed shard without a resume, say)."""


class TransientError(ShardwiseError):
    """A failure that may pass if the same work is tried again."""


class DeviceOutOfMemoryError(TransientError):
    """Out of device memory although the batch was split down to a single row."""
