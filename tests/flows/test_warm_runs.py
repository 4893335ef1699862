"""Which deployments ``serve`` runs warm, and how it notices that the code on disk is not the code it runs."""

from __future__ import annotations

import sys
import time
import types
from pathlib import Path

import pytest

from shardwise.flows.params import ScoreParams
from shardwise.flows.serving import _warm_candidates
from shardwise.flows.warm_runs import CodeStamp


@pytest.fixture
def loaded_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``shardwise`` module loaded from a file of the test's own."""
    path = tmp_path / "probe.py"
    path.write_text("VALUE = 1\n")
    module = types.ModuleType("shardwise._warm_probe")
    module.__file__ = str(path)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return path


def test_a_changed_module_file_is_noticed(loaded_module: Path) -> None:
    stamp = CodeStamp()
    assert not stamp.changed()
    time.sleep(0.01)  # a later mtime even on a coarse clock
    loaded_module.write_text("VALUE = 2  # edited while serve runs\n")
    assert stamp.changed()


def test_a_deleted_module_file_is_noticed(loaded_module: Path) -> None:
    stamp = CodeStamp()
    loaded_module.unlink()
    assert stamp.changed()


def test_modules_imported_later_are_noted_not_counted_as_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stamp = CodeStamp()
    later = tmp_path / "later.py"
    later.write_text("")
    module = types.ModuleType("shardwise._warm_later")
    module.__file__ = str(later)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    assert not stamp.changed()


def test_only_the_triggered_deployment_runs_warm_and_its_parameters_prewarm() -> None:
    warm = _warm_candidates(Path(__file__).resolve().parents[2] / "prefect.yaml")
    assert set(warm) == {"on-new-data"}
    flow, parameters = warm["on-new-data"]
    assert flow.name == "score"
    params = ScoreParams.model_validate(parameters["params"])
    assert params.run.only_new and params.model.name == "minilm"
