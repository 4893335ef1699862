"""The wheel holds one top-level package, ``shardwise``: flows/, tasks/, models/ and sql/ install in it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CHECKOUT = Path(__file__).resolve().parents[1]
_MAPPED = {
    "flows": "shardwise/flows",
    "tasks": "shardwise/tasks",
    "models": "shardwise/models",
    "sql": "shardwise/sql",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """Built from a copy of the sources: setuptools' build/ folder would keep files deleted since."""
    out, tree = tmp_path_factory.mktemp("wheel"), tmp_path_factory.mktemp("tree")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(CHECKOUT / name, tree / name)
    for top in ("shardwise", *_MAPPED):
        shutil.copytree(CHECKOUT / top, tree / top, ignore=shutil.ignore_patterns("__pycache__"))
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*pip, str(tree), "-w", str(out)], check=True, capture_output=True)
    (built,) = out.glob("shardwise-*.whl")
    return zipfile.ZipFile(built)


def _installed_as(path: Path) -> str:
    """Where a repository file lands in the wheel."""
    relative = path.relative_to(CHECKOUT).as_posix()
    top, _, rest = relative.partition("/")
    return f"{_MAPPED[top]}/{rest}" if top in _MAPPED else relative


def test_the_wheel_holds_shardwise_and_its_metadata_only(wheel: zipfile.ZipFile) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"shardwise", next(t for t in tops if t.endswith(".dist-info"))}, tops
    assert not any(
        name.startswith(("shardwise/bench", "shardwise/tests", "bench/", "tests/"))
        for name in wheel.namelist()
    )


def test_every_module_and_sql_file_of_the_tree_is_in_the_wheel(wheel: zipfile.ZipFile) -> None:
    names = set(wheel.namelist())
    expected = [
        path
        for top in ("shardwise", *_MAPPED)
        for path in (CHECKOUT / top).rglob("*")
        if path.suffix in (".py", ".sql") and "__pycache__" not in path.parts
    ]
    missing = [_installed_as(p) for p in expected if _installed_as(p) not in names]
    assert expected and not missing, f"not in the wheel (add the package to pyproject.toml): {missing}"


def test_the_console_script_names_the_namespaced_cli(wheel: zipfile.ZipFile) -> None:
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    assert "shardwise = shardwise.flows.cli:entry" in wheel.read(entry_points).decode()


def test_no_top_level_flows_tasks_models_or_sql_is_importable_outside_the_checkout(tmp_path: Path) -> None:
    probe = (
        "import importlib.util, shardwise.flows.cli, shardwise.tasks.fanout, shardwise.models, shardwise.sql;"
        "print([n for n in ('flows', 'tasks', 'models', 'sql') if importlib.util.find_spec(n)])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_tests_run_on_versions_the_delta_extra_allows() -> None:
    """The Delta sink is tested on what its extra promises: a deltalake or pyarrow outside its bounds
    here means either the bounds or the environment is wrong (issue 45, item 14)."""
    from importlib.metadata import version

    import tomllib
    from packaging.requirements import Requirement

    extras = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    bounds = {r.name: r.specifier for r in map(Requirement, extras["delta"])}
    assert set(bounds) == {"deltalake", "pyarrow"}, bounds
    for name, allowed in bounds.items():
        found = version(name)
        assert allowed.contains(found), f"{name} {found} is outside the delta extra's {allowed}"
        assert any(s.operator == "<" for s in allowed), f"{name} needs an upper bound: {allowed}"
