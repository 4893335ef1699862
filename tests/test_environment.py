"""The environment defaults every entry point sets, and that worker processes inherit them."""

from __future__ import annotations

import multiprocessing
import os

import pytest

from shardwise.environment import ENGINE_LOGS, ONEDNN_CACHES, engine_logs, set_defaults


def _seen(names: tuple[str, ...]) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


@pytest.fixture
def unset_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ONEDNN_CACHES:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("unset_caches")
def test_onednn_caches_are_bounded_unless_the_operator_chose() -> None:
    os.environ["LRU_CACHE_CAPACITY"] = "1024"  # the operator's own: kept
    set_defaults(prefect=False)
    assert os.environ["ONEDNN_PRIMITIVE_CACHE_CAPACITY"] == ONEDNN_CACHES["ONEDNN_PRIMITIVE_CACHE_CAPACITY"]
    assert os.environ["LRU_CACHE_CAPACITY"] == "1024"
    assert all(int(value) <= 64 for value in ONEDNN_CACHES.values())


@pytest.mark.usefixtures("unset_caches")
def test_a_spawned_worker_inherits_the_bounds() -> None:
    """The process runner's workers are spawned after the CLI set its defaults: they read the same bounds."""
    set_defaults(prefect=False)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        seen = pool.apply(_seen, (tuple(ONEDNN_CACHES),))
    assert seen == ONEDNN_CACHES


def test_engines_log_warnings_on_stderr_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 45: vLLM logged about 190 INFO lines a run, on stdout (after a --json line too)."""
    import logging

    vllm_logger = logging.getLogger("vllm")
    monkeypatch.setattr(vllm_logger, "level", vllm_logger.level)  # put back after

    from shardwise import environment

    for name in ENGINE_LOGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(environment, "_SET_HERE", set())
    set_defaults(prefect=False)
    assert _seen(tuple(ENGINE_LOGS)) == {
        "VLLM_LOGGING_LEVEL": "ERROR",
        "VLLM_LOGGING_STREAM": "ext://sys.stderr",
    }
    engine_logs(verbose=True)  # -v
    assert os.environ["VLLM_LOGGING_LEVEL"] == "INFO" and logging.getLogger("vllm").level == logging.INFO
    engine_logs(verbose=False)
    assert os.environ["VLLM_LOGGING_LEVEL"] == "ERROR" and logging.getLogger("vllm").level == logging.ERROR
    monkeypatch.setenv("VLLM_LOGGING_LEVEL", "DEBUG")  # the user's own: kept either way
    monkeypatch.setattr(environment, "_SET_HERE", set())
    set_defaults(prefect=False)
    engine_logs(verbose=False)
    assert os.environ["VLLM_LOGGING_LEVEL"] == "DEBUG" and logging.getLogger("vllm").level == logging.DEBUG
