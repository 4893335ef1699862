"""The one entry-point loader of the three plug-in groups (shardwise.entry_points): a name that cannot be
loaded is isolated, named when used, and leaves every other name of its group loading."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardwise.entry_points import entry_point_names, load_entry_points
from shardwise.errors import ConfigError
from shardwise.models import get_spec
from shardwise.sinks import registry as sinks
from shardwise.sources import registry as sources

_GROUPS = ("shardwise.sinks", "shardwise.sources", "shardwise.models")


def _install(site: Path, package: str, modules: dict[str, str], entries: dict[str, str]) -> None:
    """A package as pip leaves it: its modules, and a dist-info naming its entry points."""
    site.mkdir(exist_ok=True)
    for name, body in modules.items():
        (site / f"{name}.py").write_text(body)
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(f"[{group}]\n{line}\n" for group, line in entries.items()))


def _clear() -> None:
    sources.clear_cache()
    sinks.clear_cache()


@pytest.fixture
def broken(tmp_path: Path) -> Iterator[Path]:
    """One package registering ``broken`` in each group, whose module raises as it is imported."""
    site = tmp_path / "site"
    _install(
        site,
        "broken_plugin",
        {"broken_plugin": "raise RuntimeError('half-installed')\n"},
        {group: "broken = broken_plugin:KIND" for group in _GROUPS},
    )
    sys.path.insert(0, str(site))
    _clear()
    try:
        yield site
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("broken_plugin", None)
        _clear()


@pytest.mark.usefixtures("broken")
@pytest.mark.parametrize("group", _GROUPS)
def test_a_name_that_fails_to_import_is_isolated_and_named(group: str) -> None:
    assert "broken" in entry_point_names(group)
    loaded = load_entry_points(group, "thing", lambda name, found: None)
    found = loaded["broken"].found
    assert isinstance(found, ConfigError)
    assert str(found) == (
        "thing 'broken' (broken_plugin:KIND) cannot be loaded: RuntimeError: half-installed; fix or "
        "uninstall the package that registers it"
    )
    assert loaded["broken"].package == "broken_plugin 0.1"
    assert [n for n, r in loaded.items() if isinstance(r.found, ConfigError)] == ["broken"]
    assert list(loaded)[-1] == "broken", "Shardwise's own names come first"


@pytest.mark.usefixtures("broken")
def test_each_registry_keeps_its_built_in_kinds_and_names_the_broken_one_when_chosen() -> None:
    assert "broken" not in sinks.sink_kinds() and "delta" in sinks.sink_kinds()
    assert "broken" in sinks.sink_kind_names()
    with pytest.raises(ConfigError, match=r"^sink kind 'broken' \(broken_plugin:KIND\) cannot be loaded"):
        sinks.sink_kind("broken")
    assert sources.source_kind("sql").name == "sql"
    with pytest.raises(ConfigError, match=r"^source kind 'broken' \(broken_plugin:KIND\) cannot be loaded"):
        sources.source_kind("broken")
    assert get_spec("tiny").name == "tiny"
    with pytest.raises(ConfigError, match=r"^model 'broken' \(broken_plugin:KIND\) cannot be loaded"):
        get_spec("broken")


def test_a_name_two_packages_register_is_refused_naming_both(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install(site, "plug_a", {}, {"shardwise.sinks": "twice = plug_a:KIND"})
    _install(site, "plug_b", {}, {"shardwise.sinks": "twice = plug_b:KIND"})
    sys.path.insert(0, str(site))
    try:
        (found,) = load_entry_points("shardwise.sinks", "sink kind", lambda n, f: None, only="twice").values()
    finally:
        sys.path.remove(str(site))
    assert str(found.found) == (
        "sink kind 'twice' is registered by 2 installed packages (plug_a 0.1: plug_a:KIND; plug_b 0.1: "
        "plug_b:KIND); uninstall one"
    )


def test_an_object_the_group_does_not_take_is_refused_saying_why(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install(
        site, "odd_plugin", {"odd_plugin": "KIND = object()\n"}, {"shardwise.sinks": "odd = odd_plugin:KIND"}
    )
    sys.path.insert(0, str(site))
    try:
        loaded = load_entry_points("shardwise.sinks", "sink kind", lambda n, f: "is not a kind", only="odd")
    finally:
        sys.path.remove(str(site))
        sys.modules.pop("odd_plugin", None)
    assert str(loaded["odd"].found) == "sink kind 'odd' (odd_plugin:KIND) is not a kind"
