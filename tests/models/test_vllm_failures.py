"""An engine that hangs or dies fails its window with one transient error, and the next window builds a new
one: the engine's process is stopped (SIGSTOP: it makes no progress) and then killed (SIGKILL), for real."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
import torch
from vllm_lm import need_vllm, vllm_lm, vllm_settings

from shardwise.errors import TransientError
from shardwise.models.hf.causal.model import HFCausalSpec
from shardwise.models.vllm import VllmGenerator, engines_built
from shardwise.models.vllm.engines import engine_pids, shutdown_all

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("vllm")]  # one vLLM engine at a time
TEXTS = ["The shard is exact.", "Rows commit once.", "Dead letters keep their reason."]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmGenerator]:
    need_vllm()
    lm = vllm_lm(tmp_path_factory.mktemp("vllm-lm"))
    settings = vllm_settings(max_new_tokens=64, engine_options={"stall_timeout_s": 4})
    loaded = HFCausalSpec(lm, generation=settings).load(torch.device("cpu"))
    assert isinstance(loaded, VllmGenerator)
    yield loaded
    shutdown_all()


def test_a_hung_engine_then_a_dead_one_fail_their_window_and_are_rebuilt(model: VllmGenerator) -> None:
    expected = model.score_window(TEXTS)
    built = engines_built()
    (pid,) = engine_pids(model.engine_key)
    os.kill(pid, signal.SIGSTOP)  # alive, and no step ever finishes
    started = time.monotonic()
    with pytest.raises(
        TransientError, match=r"finished no step for \d+ s \(stall_timeout_s 4\).*builds a new one"
    ):
        model.score_window(TEXTS)
    assert time.monotonic() - started < 30, "the stall is bounded by stall_timeout_s, not by the engine"
    assert model.score_window(TEXTS) == expected, "the next window runs on a new engine"
    assert engines_built() == built + 1
    (pid,) = engine_pids(model.engine_key)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(TransientError, match=r"engine process died|raised EngineDeadError"):
        model.score_window(TEXTS)
    assert model.score_window(TEXTS) == expected
    assert engines_built() == built + 2
