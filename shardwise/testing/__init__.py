"""The contracts of Shardwise's seams, as checks any kind can be put through: ``shardwise.testing``.

One contract per seam (sinks, sources, models), each a set of checks
parametrised by a kind's name and a small place to work in. This repository
runs them over every registered kind; a plug-in's own tests import them;
``python -m shardwise.testing sink|source|model KIND`` runs one on an
installed kind, in temporary folders. A check that finds a guarantee broken
raises :class:`ContractBroken` (an ``AssertionError``) naming it. Nothing
here needs pytest.
"""

from __future__ import annotations

from shardwise.testing.broken import ContractBroken
from shardwise.testing.model import MODEL_CHECKS, ModelSample
from shardwise.testing.sink import SINK_CHECKS, SinkPlace
from shardwise.testing.source import SOURCE_CHECKS, SourcePlace, SourceSample

__all__ = [
    "MODEL_CHECKS",
    "SINK_CHECKS",
    "SOURCE_CHECKS",
    "ContractBroken",
    "ModelSample",
    "SinkPlace",
    "SourcePlace",
    "SourceSample",
]
