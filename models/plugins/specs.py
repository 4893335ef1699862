"""Models from outside the catalogue: installed plug-ins and ``package.module:attribute`` references.

A plug-in is a :class:`~shardwise.model.ModelSpec` *object*: something with
``name``, ``describe()`` and ``load(device)``. It is never called to make
one: a reference to a function or a class is refused, so ``--model`` can
never be used to call an arbitrary callable (``sys:exit``, ``os:fork``).

Two ways to name one:

* an installed package registers it under a name in the entry-point group
  ``shardwise.models``; listing those names never imports them, so a broken
  plug-in only fails when it is chosen;
* ``--model my_pkg.models:spec`` imports ``my_pkg.models`` with
  :func:`importlib.import_module` and takes its ``spec``; the module must be
  importable wherever the model runs (the flow's process and every worker).

Importing a module runs its code, so a run started from a deployment (the
UI's form, the API, a schedule, an event) may not name a module the worker's
operator did not allow: :func:`module_allowed`, with the operator's list from
:data:`ALLOW_MODULES_SETTING` (read by the flows, not here).

Every plug-in sits behind :class:`PluginSpec`, which checks it before any
shard runs (see :mod:`shardwise.models.plugins.checks`): ``describe()`` must
give a well formed :class:`~shardwise.model.ModelInfo` whose version is the
same on two calls, and ``load()`` a model that agrees with it.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import TYPE_CHECKING

from shardwise.entry_points import entry_point_names as registered_names
from shardwise.entry_points import load_entry_points
from shardwise.errors import ConfigError, ShardwiseError
from shardwise.model import Model, ModelInfo, ModelSpec
from shardwise.models.plugins.checks import brief, check_info, check_loaded, check_stable, spec_problem, what

if TYPE_CHECKING:
    import torch

__all__ = [
    "ALLOW_MODULES_SETTING",
    "ENTRY_POINT_GROUP",
    "PluginSpec",
    "entry_point_names",
    "entry_point_spec",
    "is_reference",
    "module_allowed",
    "reference_spec",
]

ENTRY_POINT_GROUP = "shardwise.models"
ALLOW_MODULES_SETTING = "SHARDWISE_ALLOW_MODULE_PLUGINS"
"""The worker's environment setting that lets deployment runs name ``module:attribute`` plug-ins: a comma
separated list of module names (each allows its submodules too), or ``*`` for any module."""
_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_SHOWN_NAMES = 8


class PluginSpec:
    """A plug-in's spec behind checks; ``origin`` says where it came from, for messages."""

    def __init__(self, name: str, origin: str, spec: ModelSpec) -> None:
        self.name = name
        self.origin = origin
        self._spec = spec

    def __repr__(self) -> str:
        return f"PluginSpec({self.name!r}, {self.origin!r})"

    @property
    def images(self) -> bool:
        """Whether the plug-in's rows are pictures (its spec's ``images``), so chunks are smaller."""
        return bool(getattr(self._spec, "images", False))

    def make(self) -> ModelSpec:
        """The plug-in's own spec object."""
        return self._spec

    def describe(self) -> ModelInfo:
        """The plug-in's checked description; it must be the same twice over."""
        first, second = self._described(self._spec), self._described(self._spec)
        check_stable(first, second, self._where())
        return first

    def load(self, device: torch.device) -> Model:
        """Load the plug-in's model and check it against its own description."""
        info = self._described(self._spec)
        model = self._spec.load(device)
        check_loaded(model, info, self._where())
        return model

    def _described(self, spec: ModelSpec) -> ModelInfo:
        try:
            info = spec.describe()
        except ShardwiseError:
            raise  # the plug-in's own message, already in the form users read
        except Exception as exc:
            raise ConfigError(f"{self._where()}: describe() raised {brief(exc)}; fix the plug-in") from exc
        check_info(info, spec.name, self._where())
        return info

    def _where(self) -> str:
        return f"model {self.name!r} ({self.origin})"


def is_reference(name: str) -> bool:
    """Whether ``name`` has the form ``package.module:attribute``."""
    return bool(_REFERENCE.match(name))


def reference_spec(reference: str) -> PluginSpec:
    """The plug-in that ``package.module:attribute`` names, imported now; a mistake is a ConfigError."""
    module_name, attribute = reference.split(":")
    shown = f"model {reference!r}"
    found = _attribute(_import(module_name, shown), attribute, shown)
    return _plugin(found, shown, reference, expected_name=None)


def entry_point_names() -> list[str]:
    """Names registered under ``shardwise.models`` by installed packages, sorted; nothing is imported."""
    return registered_names(ENTRY_POINT_GROUP)


def entry_point_spec(name: str) -> PluginSpec | None:
    """The installed plug-in registered as ``name``, imported now; None when no package registers it."""
    registered = load_entry_points(ENTRY_POINT_GROUP, "model", _no_attribute, only=name).get(name)
    if registered is None:
        return None
    if isinstance(registered.found, ConfigError):
        raise registered.found
    origin = f"entry point of package {registered.package}: {registered.where}"
    return _plugin(registered.found, f"model {name!r} ({origin})", origin, expected_name=name)


def _no_attribute(name: str, found: object) -> str | None:
    if isinstance(found, ModuleType):
        return f"names a module, not an object in it; register it as {name} = {found.__name__}:ATTRIBUTE"
    return None


def module_allowed(module_name: str, allowed: str | None) -> bool:
    """Whether ``allowed`` (the operator's :data:`ALLOW_MODULES_SETTING`) lets runs import ``module_name``."""
    listed = {part.strip() for part in (allowed or "").split(",") if part.strip()}
    return "*" in listed or any(module_name == m or module_name.startswith(m + ".") for m in listed)


def _plugin(found: object, shown: str, origin: str, expected_name: str | None) -> PluginSpec:
    problem = spec_problem(found)
    if problem is not None:
        called = " and is never called" if callable(found) else ""
        raise ConfigError(
            f"{shown} is {what(found)}, not a ModelSpec ({problem}); a plug-in is an object with name, "
            f"describe() and load(device){called}: point at one, e.g. spec = MySpec(...)"
        )
    spec: ModelSpec = found  # type: ignore[assignment]
    if not isinstance(spec.name, str) or not spec.name.strip():
        raise ConfigError(f"{shown}: the spec's name is {spec.name!r}; give it a non-empty name")
    if expected_name is not None and spec.name != expected_name:
        raise ConfigError(
            f"{shown} gives a spec named {spec.name!r}; name the entry point {spec.name!r}, or the spec "
            f"{expected_name!r}: the two must agree"
        )
    return PluginSpec(spec.name, origin, spec)


def _import(module_name: str, shown: str) -> ModuleType:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = exc.name or module_name
        if module_name == missing or module_name.startswith(missing + "."):
            raise ConfigError(
                f"{shown}: no module named {missing!r} can be imported here; put the folder that holds "
                "it on PYTHONPATH or pip install its package, on every worker too"
            ) from exc
        raise ConfigError(
            f"{shown}: module {module_name!r} imports {missing!r}, which is not installed; "
            "pip install it, on every worker too"
        ) from exc
    except Exception as exc:
        raise ConfigError(f"{shown}: importing {module_name!r} raised {brief(exc)}; fix the module") from exc


def _attribute(module: ModuleType, attribute: str, shown: str) -> object:
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ConfigError(
                f"{shown}: {what(found, short=True)} has no attribute {part!r}; {_offer(found)}"
            )
        found = getattr(found, part)
    return found


def _offer(holder: object) -> str:
    """The names worth pointing at in ``holder``: its model specs, else a few public names."""
    public = sorted(n for n in dir(holder) if not n.startswith("_"))
    specs = [n for n in public if spec_problem(getattr(holder, n, None)) is None]
    if specs:
        return f"the model specs in it are: {', '.join(specs[:_SHOWN_NAMES])}"
    if not public:
        return "it has no public names"
    more = f" (and {len(public) - _SHOWN_NAMES} more)" if len(public) > _SHOWN_NAMES else ""
    return f"its public names are: {', '.join(public[:_SHOWN_NAMES])}{more}"
