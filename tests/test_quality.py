"""ruff and mypy stay clean on the engine: run them as part of the one test command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed; pip install -e '.[dev]'")
    return found


def test_ruff_is_clean() -> None:
    out = subprocess.run(
        [_tool("ruff"), "check", "shardwise", "models", "flows", "tasks", "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_mypy_is_clean_on_the_engine() -> None:
    out = subprocess.run([_tool("mypy"), "shardwise"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_engine_never_imports_prefect() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "shardwise").rglob("*.py")
        if any(
            line.lstrip().startswith(("import prefect", "from prefect"))
            for line in path.read_text().splitlines()
        )
    ]
    assert not offenders, f"shardwise/ must stay orchestrator-free; these import prefect: {offenders}"
