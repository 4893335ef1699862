"""A model kind that batches by itself (shardwise.model.SelfBatching: an engine such as vLLM, a remote
endpoint) is given whole windows of values and answers in input order; the engine, the shards, the
exactly-once commits and the dead letters around it are the same as for every other model."""

from __future__ import annotations

import pytest
from self_batching_model import Shouter

from shardwise.batch.config import EngineConfig
from shardwise.batch.engine import Engine
from shardwise.errors import InputError
from shardwise.model import SelfBatching


def test_the_engine_gives_a_self_batching_model_whole_windows_and_keeps_input_order() -> None:
    model = Shouter()
    assert isinstance(model, SelfBatching)
    rows = [(i, f"text {i}" if i % 7 else "bad one") for i in range(50)]
    rows[3] = (3, InputError("the source could not read it"))
    run = Engine(model, EngineConfig(window_rows=16)).run(rows)
    with run:
        results = list(run)
    assert [r.key for r in results] == list(range(50)), "input order"
    assert model.windows == [15, 16, 16, 2], "windows of 16 rows, less the one the source refused"
    assert results[3].error is not None and "could not read" in str(results[3].error)
    assert results[7].error is not None and "refused" in str(results[7].error)
    assert results[1].values == {"shout": "TEXT 1", "letters": 6}
    good = [r for r in results if r.ok]
    assert run.stats.rows == 50 and run.stats.rows_failed == 50 - len(good)
    assert run.stats.counts == {"letters": sum(r.values["letters"] for r in good)}  # type: ignore[index]


def test_a_model_that_loses_a_row_fails_the_window_naming_the_rule() -> None:
    model = Shouter()
    model.score_window = lambda values: []  # type: ignore[method-assign]
    with pytest.raises(Exception, match="gave 0 outcomes for 3 rows"):
        list(Engine(model).run([(1, "a"), (2, "b"), (3, "c")]))
