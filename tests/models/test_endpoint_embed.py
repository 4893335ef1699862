"""Remote embeddings (``openai-embed:NAME``) against a real ``vllm serve`` pooling server on loopback."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from endpoint_servers import (
    KEY_REFERENCE,
    SERVED_NAME,
    FaultProxy,
    every,
    require_vllm,
    resolver,
    tiny_llama,
    vllm_server,
)

from shardwise.errors import ConfigError, InputError
from shardwise.model import OutputColumn
from shardwise.models import get_spec
from shardwise.models.endpoints import EmbeddingSpec, EndpointOptions

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm-serve")]  # one vllm serve at a time

TEXTS = [f"text {i} about shards and chunks" for i in range(12)]


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory):
    require_vllm()
    root = tmp_path_factory.mktemp("embed")
    lm = tiny_llama(root / "lm")
    with vllm_server(lm, root / "vllm.log", "--runner", "pooling", "--convert", "embed") as url:
        yield url


def spec(base: str, **fields) -> EmbeddingSpec:
    opened = get_spec(f"openai-embed:{SERVED_NAME}")
    assert isinstance(opened, EmbeddingSpec)
    options = EndpointOptions(api_base=f"{base}/v1", api_key=KEY_REFERENCE, max_concurrency=4)
    from dataclasses import replace

    return replace(opened.configured(options).resolving(resolver), **fields)


def embedded(model_spec: EmbeddingSpec, values: list[object]) -> list[object]:
    model = model_spec.load(torch.device("cpu"))
    try:
        return list(model.score_window(values))
    finally:
        model.close()


def test_vectors_come_back_in_order_as_an_encoders_and_a_refused_text_is_found_alone(origin: str) -> None:
    model_spec = spec(origin, batch_size=4)
    info = model_spec.describe()
    assert info.outputs == (OutputColumn("embedding", "vector", 128),)  # asked of the server: hidden size
    model_spec.check_reachable()

    clean = embedded(model_spec, list(TEXTS))
    too_long = "word " * 2000
    mixed = embedded(model_spec, [*TEXTS[:5], too_long, None, *TEXTS[5:]])
    assert len(clean) == len(TEXTS)
    assert all(isinstance(o, dict) and o["embedding"].dtype == np.float32 for o in clean)
    assert isinstance(mixed[5], InputError) and "maximum context length" in str(mixed[5])
    assert isinstance(mixed[6], InputError) and "null" in str(mixed[6])
    kept = mixed[:5] + mixed[7:]
    for got, want in zip(kept, clean, strict=True):
        np.testing.assert_allclose(got["embedding"], want["embedding"], rtol=1e-4, atol=1e-5)
    assert not np.allclose(clean[0]["embedding"], clean[1]["embedding"])


def test_throttling_and_cut_connections_change_no_vector(origin: str) -> None:
    clean = embedded(spec(origin, batch_size=2), list(TEXTS))
    with FaultProxy(origin, every(n429=3, cut=5)) as proxy:
        faulty = embedded(spec(proxy.origin, batch_size=2), list(TEXTS))
    assert proxy.counts["429"] >= 2 and proxy.counts["cut"] >= 1
    for got, want in zip(faulty, clean, strict=True):
        np.testing.assert_allclose(got["embedding"], want["embedding"], rtol=1e-4, atol=1e-5)


def test_dimensions_a_model_cannot_shorten_to_are_refused_before_the_run(origin: str) -> None:
    with pytest.raises(ConfigError, match=r"would not embed a short text.*dimensions") as refused:
        spec(origin, dimensions=16).check_reachable()
    assert "\n" not in str(refused.value)
