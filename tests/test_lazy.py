"""Lazy package exports: a name loads its own module on first use; an unknown name is an AttributeError."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest


def test_a_package_name_loads_only_its_module() -> None:
    probe = (
        "import sys; from shardwise.sources.images import ImageAccess; "
        "import shardwise.pipeline as p; import shardwise.tasks; "
        "print(ImageAccess.__module__, 'torch' in sys.modules, 'prefect' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["shardwise.sources.images.access", "False", "False"], done.stderr


def test_the_package_gives_the_same_object_as_its_module() -> None:
    import shardwise.pipeline as pipeline
    from shardwise.pipeline.spec import RunSpec

    assert pipeline.RunSpec is RunSpec
    assert "RunSpec" in vars(pipeline), "kept once asked for"


def test_an_unknown_name_is_an_attribute_error() -> None:
    import shardwise.pipeline as pipeline

    with pytest.raises(AttributeError, match=r"module 'shardwise\.pipeline' has no attribute 'nothing'"):
        _ = pipeline.nothing  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        exec("from shardwise.sources import nothing")


def test_a_declared_module_gives_the_names_both_lists_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardwise.pipeline as pipeline
    from shardwise.pipeline import spec

    assert pipeline.SourceSpec is spec.SourceSpec  # in both __all__ lists
    package = tmp_path / "declaring"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from shardwise.lazy import DECLARED, lazy_exports\n"
        '__all__ = ["shown"]\n'
        '__getattr__ = lazy_exports(__name__, {".inner": DECLARED})\n'
    )
    (package / "inner.py").write_text('__all__ = ["shown", "kept"]\nshown, kept = 1, 2\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    declaring = importlib.import_module("declaring")
    assert declaring.shown == 1
    with pytest.raises(AttributeError, match="has no attribute 'kept'"):
        _ = declaring.kept  # the module declares it, the package does not export it
