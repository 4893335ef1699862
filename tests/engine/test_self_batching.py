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


def test_with_a_book_a_recording_model_gets_each_window_s_keys_and_place_and_others_do_not() -> None:
    from shardwise.model.recorded import Recorded, WindowRef

    class RecordingShouter(Shouter):
        def __init__(self) -> None:
            super().__init__()
            self.refs: list[WindowRef] = []

        def score_recorded(self, values, window):  # type: ignore[no-untyped-def]
            self.refs.append(window)
            return self.score_window(values)

    book = object()  # the engine only hands it on
    rows = [(i, f"text {i}") for i in range(40)]
    rows[17] = (17, InputError("the source could not read it"))
    recording = RecordingShouter()
    assert isinstance(recording, Recorded) and not isinstance(Shouter(), Recorded)
    with Engine(recording, EngineConfig(window_rows=16)).run(rows, book=book) as run:  # type: ignore[arg-type]
        results = list(run)
    assert [(ref.position, ref.keys[:2], len(ref.keys)) for ref in recording.refs] == [
        (0, ("0", "1"), 16),
        (16, ("16", "18"), 15),  # the row the source refused is not the model's
        (32, ("32", "33"), 8),
    ]
    assert all(ref.book is book for ref in recording.refs)
    assert results[1].values == {"shout": "TEXT 1", "letters": 6}
    plain = RecordingShouter()
    with Engine(plain, EngineConfig(window_rows=16)).run(rows) as run:  # no book: score_window only
        list(run)
    assert plain.refs == [] and plain.windows == [16, 15, 8]
