"""The whole loop with the tiny model: order, bad rows, truncation, stats, bounded reading."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise import BatchStats, ConfigError, Engine, EngineConfig, InputError


def _sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "shard", "token"]) for _ in range(words))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 150), min_size=1, max_size=120),
    window=st.integers(1, 50),
    max_tokens=st.integers(16, 600),
)
def test_outputs_come_back_in_input_order(
    tiny_model, lengths: list[int], window: int, max_tokens: int
) -> None:
    rng = random.Random(len(lengths))
    rows = [(f"k{i}", _sentence(rng, n)) for i, n in enumerate(lengths)]
    run = Engine(tiny_model, EngineConfig(max_tokens=max_tokens, window_rows=window)).run(rows)
    results = list(run)
    assert [r.key for r in results] == [k for k, _ in rows]
    assert all(r.ok for r in results)
    # Each row's vector is its own, whatever batch it landed in.
    alone = Engine(tiny_model, EngineConfig(max_batch_size=1)).run(rows)
    np.testing.assert_allclose(
        np.stack([r.values["embedding"] for r in results]).reshape(len(rows), -1),  # type: ignore[index]
        np.stack([r.values["embedding"] for r in alone]).reshape(len(rows), -1),  # type: ignore[index]
        atol=2e-5,
    )


def test_no_rows_gives_no_results(tiny_model) -> None:
    run = Engine(tiny_model).run([])
    assert list(run) == []
    assert run.stats.rows == 0 and run.stats.padding_efficiency == 1.0


def test_bad_rows_become_errors_and_the_rest_is_scored(tiny_model) -> None:
    rows = [
        (1, "a fine sentence"),
        (2, None),
        (3, ""),
        (4, "   "),
        (5, 42),
        (6, b"\xff\xfe broken"),
        (7, b"bytes are fine too"),
        (8, "unpaired \ud800 surrogate"),
        (9, "another fine sentence"),
    ]
    run = Engine(tiny_model).run(rows)
    results = list(run)
    assert [r.key for r in results] == list(range(1, 10))
    assert [r.ok for r in results] == [True, False, False, False, False, False, True, False, True]
    messages = {r.key: str(r.error) for r in results if not r.ok}
    assert "null" in messages[2]
    assert "empty" in messages[3] and "empty" in messages[4]
    assert "got int 42" in messages[5]
    assert "not valid UTF-8" in messages[6]
    assert "surrogate" in messages[8]
    assert all(isinstance(r.error, InputError) for r in results if not r.ok)
    assert (run.stats.rows, run.stats.rows_failed) == (9, 6)


def test_a_text_that_gives_no_tokens_is_a_dead_letter(tiny_model) -> None:
    from shardwise.model import Encoding

    class Silent(type(tiny_model)):  # type: ignore[misc]
        def encode(self, text):  # type: ignore[no-untyped-def]
            return Encoding([], False) if text == "nothing" else super().encode(text)

    model = Silent.__new__(Silent)
    model.__dict__.update(tiny_model.__dict__)
    results = list(Engine(model).run([(1, "nothing"), (2, "something")]))
    assert [r.ok for r in results] == [False, True]
    assert "text gives no tokens under model 'tiny'" in str(results[0].error)


def test_a_window_of_only_bad_rows_still_reports_them(tiny_model) -> None:
    rows = [(1, None), (2, None), (3, "ok"), (4, None)]
    results = list(Engine(tiny_model, EngineConfig(window_rows=2)).run(rows))
    assert [(r.key, r.ok) for r in results] == [(1, False), (2, False), (3, True), (4, False)]


def test_long_text_is_truncated_and_says_so(tiny_model) -> None:
    rows = [(1, "word " * 1000), (2, "short")]
    results = list(Engine(tiny_model).run(rows))
    assert [r.truncated for r in results] == [True, False]
    assert results[0].ok


def test_stats_add_up(tiny_model) -> None:
    rng = random.Random(0)
    rows = [(i, _sentence(rng, rng.randint(1, 60))) for i in range(500)]
    seen: list[BatchStats] = []
    run = Engine(tiny_model, EngineConfig(max_tokens=512)).run(rows, on_batch=seen.append)
    list(run)
    stats = run.stats
    assert stats.rows == 500 and stats.batches == len(seen)
    assert stats.real_tokens == sum(b.real_tokens for b in seen)
    assert stats.padded_tokens == sum(b.padded_tokens for b in seen) >= stats.real_tokens
    assert all(b.padded_tokens <= 512 or b.rows == 1 for b in seen)
    assert 0.9 < stats.padding_efficiency <= 1.0
    assert stats.rows_per_s > 0 and stats.tokens_per_s > 0 and stats.wall_s > 0
    assert stats.as_dict()["padding_efficiency"] == stats.padding_efficiency


def test_input_is_read_one_window_at_a_time(tiny_model) -> None:
    pulled = 0

    def rows() -> Iterator[tuple[int, str]]:
        nonlocal pulled
        for i in range(10_000):
            pulled += 1
            yield i, f"row {i}"

    with Engine(tiny_model, EngineConfig(window_rows=100)).run(rows()) as run:
        first = next(iter(run))
        assert first.key == 0
        assert pulled <= 300, f"read {pulled} rows to score the first window of 100"


def test_early_close_stops_the_prefetch_thread(tiny_model) -> None:
    run = Engine(tiny_model, EngineConfig(window_rows=10)).run((i, "text") for i in range(10_000))
    it = iter(run)
    next(it)
    run.close()
    assert not [t for t in threading.enumerate() if t.name == "shardwise-prefetch"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_tokens": 0}, "max_tokens must be a positive integer or None"),
        ({"window_rows": -1}, "window_rows must be a positive integer, got -1"),
        ({"prefetch_depth": 0}, "prefetch_depth must be >= 1"),
        ({"precision": "fp8"}, "precision must be one of auto, fp32, bf16, fp16, int8; got 'fp8'"),
    ],
)
def test_config_errors_name_the_value(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        EngineConfig(**kwargs)  # type: ignore[arg-type]


def test_device_defaults_fill_only_unset_fields() -> None:
    import torch

    cpu = EngineConfig(max_tokens=99).for_device(torch.device("cpu"))
    assert (cpu.max_tokens, cpu.pad_to_multiple) == (99, 1)
    cuda = EngineConfig().for_device(torch.device("cuda"))
    assert cuda.pad_to_multiple == 8
