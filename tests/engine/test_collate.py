"""The text models' collate: each batch is padded only to its own longest row."""

from __future__ import annotations

import torch

from shardwise.batch.collate import collate


def test_pads_to_own_longest_with_mask() -> None:
    out = collate([[5, 6, 7], [8]], pad_id=0)
    assert out.input_ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert out.attention_mask is not None
    assert out.attention_mask.tolist() == [[1, 1, 1], [1, 0, 0]]
    assert out.padded_cost == 6


def test_rounds_width_to_multiple() -> None:
    out = collate([[1, 2, 3]], pad_id=9, multiple=8)
    assert out.input_ids.shape == (1, 8)
    assert out.input_ids[0, 3:].eq(9).all()
    assert out.attention_mask is not None and out.attention_mask.sum() == 3


def test_no_mask_when_nothing_is_padded() -> None:
    out = collate([[1, 2], [3, 4]], pad_id=0)
    assert out.attention_mask is None
    assert out.padded_cost == 4


def test_dtype_is_int64() -> None:
    out = collate([[1], [2, 3]], pad_id=0)
    assert out.input_ids.dtype == torch.int64
    assert out.attention_mask is not None and out.attention_mask.dtype == torch.int64
