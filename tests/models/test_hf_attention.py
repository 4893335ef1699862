"""Grouped-query attention read in place on a CPU: the logits of transformers' SDPA, without its copies."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hf_builders import tiny_causal_lm

from shardwise.models.hf.causal.attention import IN_PLACE_GQA, read_kv_in_place

pytest.importorskip("transformers")

CPU = torch.device("cpu")


def _load(root: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(root, local_files_only=True).eval()


def _left_padded(rows: int = 5, longest: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows of different lengths, left-padded: the mask transformers' SDPA answers with copies."""
    ids = torch.randint(2, 300, (rows, longest), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(rows, longest, dtype=torch.long)
    for row in range(rows):
        mask[row, : row * 7] = 0
    return ids, mask


def test_a_grouped_model_on_a_cpu_is_switched_and_its_logits_and_cache_steps_equal_sdpas(
    tmp_path: Path,
) -> None:
    root = tiny_causal_lm(tmp_path / "lm")  # 4 query heads, 2 key/value heads
    ours, theirs = _load(root), _load(root)
    assert read_kv_in_place(ours, CPU) and ours.config._attn_implementation == IN_PLACE_GQA
    assert theirs.config._attn_implementation == "sdpa"
    ids, mask = _left_padded()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.inference_mode():
        a = ours(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        b = theirs(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True)
        real = mask.bool()
        assert torch.allclose(a.logits[real], b.logits[real], atol=1e-5)
        step = a.logits[:, -1].argmax(-1, keepdim=True)  # a decode step over the kept cache
        longer = torch.cat([mask, mask.new_ones(len(mask), 1)], dim=1)
        next_at = positions[:, -1:] + 1
        a2 = ours(
            input_ids=step, attention_mask=longer, position_ids=next_at, past_key_values=a.past_key_values
        )
        b2 = theirs(
            input_ids=step, attention_mask=longer, position_ids=next_at, past_key_values=b.past_key_values
        )
    assert torch.allclose(a2.logits, b2.logits, atol=1e-5)


def test_a_model_elsewhere_or_without_grouped_heads_is_left_as_it_is(tmp_path: Path) -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    root = tiny_causal_lm(tmp_path / "lm")
    assert not read_kv_in_place(_load(root), torch.device("cuda"))
    config = LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=4)  # fmt: skip
    plain = LlamaForCausalLM(config).eval()
    assert not read_kv_in_place(plain, CPU) and plain.config._attn_implementation != IN_PLACE_GQA
