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

import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

__all__ = ["DECLARED", "lazy_exports"]

DECLARED: Literal["declared"] = "declared"
"""In place of a submodule's names: those of its ``__all__`` that the package's ``__all__`` lists too, read
from its source (not imported), so that the two lists cannot drift apart."""


def lazy_exports(
    package: str, modules: Mapping[str, tuple[str, ...] | Literal["declared"]]
) -> Callable[[str], object]:
    """A module-level ``__getattr__`` for ``package``: each name in ``modules[m]`` (or, for
    :data:`DECLARED`, each name ``m`` declares that the package exports) comes from submodule ``m``
    (relative, such as ``".spec"``), imported the first time the name is asked for."""
    where: dict[str, str] = {}

    def __getattr__(name: str) -> object:
        if not where:
            exported = set(getattr(sys.modules[package], "__all__", ()))
            for submodule, names in modules.items():
                listed = _declared(submodule, package) & exported if names == DECLARED else names
                where.update(dict.fromkeys(listed, submodule))
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # asked once: later lookups find it directly
        return value

    return __getattr__


def _declared(module: str, package: str) -> set[str]:
    """The names of ``module``'s ``__all__`` (a literal list), read from its source without importing it."""
    spec = importlib.util.find_spec(importlib.util.resolve_name(module, package))
    assert spec is not None and spec.origin is not None, f"{module} of {package} has no source"
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return set()
