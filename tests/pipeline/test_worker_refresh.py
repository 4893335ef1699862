"""A long-lived process's worker cache never serves a model whose files changed (``WorkerCache.refresh``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hf_builders import tiny_classifier

from shardwise.models import get_spec
from shardwise.pipeline import WorkerCache
from shardwise.pipeline.spec import ModelChoice

CPU = torch.device("cpu")


def _logits(model, text: str) -> torch.Tensor:
    with torch.no_grad():
        return model.run(model.collate([model.prepare(text)]))


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return tiny_classifier(tmp_path / "model", seed=0)


def test_an_unchanged_model_stays_loaded(model_dir: Path) -> None:
    cache, name = WorkerCache(get_spec), str(model_dir)
    first, load_s = cache.model(ModelChoice(name=name), CPU)
    assert load_s > 0 and cache.loads == 1
    assert not cache.refresh(ModelChoice(name=name), get_spec(name).describe())
    again, load_s = cache.model(ModelChoice(name=name), CPU)
    assert again is first and load_s == 0.0 and cache.loads == 1


def test_a_model_whose_weights_changed_is_loaded_again_not_served_stale(model_dir: Path) -> None:
    cache, name = WorkerCache(get_spec), str(model_dir)
    old, _ = cache.model(ModelChoice(name=name), CPU)
    tiny_classifier(model_dir, seed=1)  # other weights in the same directory, as a redeploy writes them

    assert cache.refresh(ModelChoice(name=name), get_spec(name).describe()), (
        "the new description says the version changed"
    )
    new, load_s = cache.model(ModelChoice(name=name), CPU)
    assert new is not old and load_s > 0 and cache.loads == 2
    assert new.version == get_spec(name).describe().version != old.version
    fresh = get_spec(name).load(CPU)
    text = "a row that landed after the redeploy"
    assert torch.equal(_logits(new, text), _logits(fresh, text))
    assert not torch.equal(_logits(new, text), _logits(old, text))
