"""Running a seam's contract on an installed kind, in temporary folders: ``python -m shardwise.testing``."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardwise.errors import ConfigError
from shardwise.testing.broken import ContractBroken

__all__ = ["main", "run_contract"]

_USAGE = "usage: python -m shardwise.testing sink|source|model KIND"


@dataclass(frozen=True)
class _Seam:
    checks: Callable[[], Mapping[str, Callable[[Any], Any]]]
    installed: Callable[[], list[str]]
    place: Callable[[str, Path], Any]
    """A place for one check of the kind, in an empty folder; a ConfigError when there can be none."""


def _sink() -> _Seam:
    from shardwise.sinks.registry import sink_kind_names
    from shardwise.testing.sink import SINK_CHECKS, scratch_place

    return _Seam(lambda: SINK_CHECKS, sink_kind_names, scratch_place)


def _source() -> _Seam:
    from shardwise.sources.registry import kind_names
    from shardwise.testing.source import SOURCE_CHECKS, sample_for

    return _Seam(lambda: SOURCE_CHECKS, kind_names, sample_for)


def _model() -> _Seam:
    from shardwise.models import known_models
    from shardwise.testing.model import MODEL_CHECKS, sample_for

    return _Seam(lambda: MODEL_CHECKS, known_models, sample_for)


_SEAMS: dict[str, Callable[[], _Seam]] = {"sink": _sink, "source": _source, "model": _model}


def run_contract(seam: str, kind: str, log: Callable[[str], None] = lambda line: None) -> None:
    """Run every check of ``seam``'s contract on ``kind``, each in a temporary folder; raises
    :class:`ContractBroken` for the first guarantee broken (a check that crashes breaks its guarantee)."""
    found = _SEAMS[seam]()
    for name, check in found.checks().items():
        with tempfile.TemporaryDirectory(prefix="shardwise-contract-") as folder:
            place = found.place(kind, Path(folder))
            try:
                check(place)
            except ContractBroken:
                raise
            except Exception as exc:
                raise ContractBroken(name, f"{type(exc).__name__}: {exc}") from exc
        log(f"{seam} {kind}: {name}: ok")


def main(argv: list[str]) -> int:
    """The command line: 0 when the contract holds, 1 naming the broken guarantee, 2 for a usage error."""
    if len(argv) != 2 or argv[0] not in _SEAMS:
        print(_USAGE, file=sys.stderr)
        return 2
    seam, kind = argv
    installed = _SEAMS[seam]().installed()
    if kind not in installed:
        print(f"{seam} kind {kind!r} is not installed; installed: {', '.join(installed)}", file=sys.stderr)
        return 2
    try:
        run_contract(seam, kind, print)
    except ContractBroken as exc:
        print(f"{seam} {kind}: {exc}", file=sys.stderr)
        return 1
    except ConfigError as exc:
        print(f"{seam} {kind}: {exc}", file=sys.stderr)
        return 2
    print(f"{seam} {kind}: the contract holds")
    return 0
