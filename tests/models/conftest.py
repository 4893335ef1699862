"""Fixtures shared by the model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from endpoint_servers import require_vllm, tiny_llama, vllm_server


@pytest.fixture(scope="session")
def llama_origin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One ``vllm serve`` of the tiny random Llama per test worker, shared by the endpoint modules that
    ask it for text under its own name (they run on one worker: group ``vllm-serve``); its origin."""
    require_vllm()
    root = tmp_path_factory.mktemp("llama-serve")
    with vllm_server(tiny_llama(root / "lm"), root / "vllm.log") as url:
        yield url
