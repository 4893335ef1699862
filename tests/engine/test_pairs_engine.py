"""Pairs through the engine: segment ids padded with the batch, split with it, rows back in input order."""

from __future__ import annotations

import numpy as np
import torch
from engine_fakes import OOMAbove

from shardwise.batch.batching import CostBudget
from shardwise.batch.collate import collate_encodings
from shardwise.batch.engine import Engine
from shardwise.batch.forward import Forward
from shardwise.model import Encoding, ModelInputs
from shardwise.model.text import Inputs


def test_segment_ids_are_padded_with_zeros_and_absent_without_pairs() -> None:
    rows = [Encoding([1, 5, 2, 6, 2], False, [0, 0, 0, 1, 1]), Encoding([1, 7, 2], False, None)]
    types = collate_encodings(rows, pad_id=0).token_type_ids
    assert types is not None
    assert types.tolist() == [[0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]
    assert collate_encodings([Encoding([1, 2], False)], pad_id=0).token_type_ids is None


def test_an_oom_split_splits_the_segment_ids_with_the_rows(tiny_model) -> None:
    seen: list[tuple[int, ...] | None] = []

    class Spy(OOMAbove):
        def run(self, batch):  # type: ignore[no-untyped-def]
            types = batch.token_type_ids
            seen.append(None if types is None else tuple(types.shape))
            return super().run(batch)

    rows = [Encoding([1, 3, 2, 4, 2], False, [0, 0, 0, 1, 1])] * 2 + [
        Encoding([1, 3, 2], False, [0, 0, 1])
    ] * 2
    forward = Forward(Spy(tiny_model, limit=12), CostBudget(4096), pad_to_multiple=1, precision="fp32")
    with torch.inference_mode():
        forward(rows, collate_encodings(rows, pad_id=0))
    assert seen == [(4, 5), (2, 5), (2, 3)], "each half keeps its rows' segment ids, re-padded"


def test_the_tiny_model_cuts_the_longer_member_of_a_pair_first(tiny_model) -> None:
    room = tiny_model.max_length - 3  # [CLS] text [SEP] pair [SEP]
    short, long = "a b c", " ".join(["word"] * 500)
    cut = tiny_model.encode((short, long))
    assert len(cut.ids) == tiny_model.max_length and cut.truncated
    assert cut.ids[:5] == [*tiny_model.encode(short).ids[:4], 2], "the short member is kept whole"
    both = tiny_model.encode((long, long))
    assert len(both.ids) == tiny_model.max_length and room // 2 == both.ids.index(2) - 1


def test_pairs_come_back_in_input_order_and_equal_scoring_one_at_a_time(tiny_model) -> None:
    pairs = [(f"query {i} " + "x " * (i * 7 % 23), f"document {i} " + "y " * (i * 5 % 31)) for i in range(30)]
    results = list(Engine(tiny_model).run([(i, Inputs.pair(q, d)) for i, (q, d) in enumerate(pairs)]))
    assert [r.key for r in results] == list(range(30))
    for result, pair in zip(results, pairs, strict=True):
        encoding = tiny_model.prepare(Inputs.pair(*pair))
        with torch.inference_mode():
            alone = tiny_model.run(ModelInputs(torch.tensor([encoding.ids])))[0].numpy()
        np.testing.assert_allclose(result.values["embedding"], alone, atol=1e-5)  # type: ignore[index]
