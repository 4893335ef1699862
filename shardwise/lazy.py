"""Lazy package exports: a package names what it exports, and each name's module loads on first use.

A package's ``__init__`` that imported all its modules made every import of
any one of them pay for all: ``shardwise --help`` built its parser from the
flow's parameters and, through ``shardwise.sources`` and ``shardwise.tasks``,
imported torch and Prefect (3 s before the help appeared). With
:func:`lazy_exports`, ``from shardwise.pipeline import RunSpec`` works as
before and loads only the module that defines ``RunSpec``. The package keeps
the same names under ``if TYPE_CHECKING:`` for type checkers.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_exports"]


def lazy_exports(package: str, modules: Mapping[str, tuple[str, ...]]) -> Callable[[str], object]:
    """A module-level ``__getattr__`` for ``package``: each name in ``modules[m]`` comes from submodule
    ``m`` (relative, such as ``".spec"``), imported the first time the name is asked for."""
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # asked once: later lookups find it directly
        return value

    return __getattr__
